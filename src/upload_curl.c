/*
 * upload_curl.c - the uploader's libcurl side: sending one queued job over HTTP, and
 * curl_global_init once per process.
 *
 * ppk__upload_send_job() runs on the uploader thread (upload.c) with no lock held. It
 * builds the request through the sink's ops, adds the configured headers, the
 * Content-Type and an empty Expect:, and sends it with the curl handle that thread alone
 * uses; `in_transfer` is set around curl_easy_perform. Every transfer has connect and
 * total timeouts, CURLOPT_NOSIGNAL, no connection reuse (so an idle handle holds no
 * socket across fork), and a progress callback that aborts when `abort` is set. The
 * response status is read after each transfer: a 2xx is sent (its body handed to
 * ops.answer when the sink reads answers); a curl failure or a status the sink retries
 * (ops.retryable; by default 5xx, 408 and 429) is retried once after retry_backoff_ms, or
 * after the answer's Retry-After when that is longer (at most RETRY_AFTER_MAX_MS);
 * anything else is dropped. A
 * transfer aborted for fork is sent again when the fork is over, one aborted for
 * shutdown is dropped. The lock is taken only to update the uploader's state and
 * statistics.
 */
#include "uploader.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- libcurl global state ------------------------------------------------------------ */

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_rc = CURLE_FAILED_INIT;

static void curl_init_once(void) { g_curl_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int ppk__upload_global_init(void) {
    pthread_once(&g_curl_once, curl_init_once);
    return g_curl_rc == CURLE_OK ? 0 : PPK_ESYS;
}

/* ---- one job ------------------------------------------------------------------------ */

int ppk__upload_check_url(const char *url, const char *what, char *err, size_t err_len) {
    CURLU *h = curl_url();
    if (!h) return PPK_ENOMEM;
    char *host = NULL, *port = NULL;
    CURLUcode rc = curl_url_set(h, CURLUPART_URL, url, 0);
    if (!rc) rc = curl_url_get(h, CURLUPART_HOST, &host, 0);
    if (!rc && curl_url_get(h, CURLUPART_PORT, &port, 0) == CURLUE_OK && port &&
        (atol(port) < 1 || atol(port) > 65535))
        rc = CURLUE_BAD_PORT_NUMBER; /* 0: libcurl takes it, no server listens there */
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(h);
    if (rc == CURLUE_OUT_OF_MEMORY) return PPK_ENOMEM;
    if (rc)
        return ppk__upload_err(err, err_len, "%s: \"%.200s\": %s", what, url,
                               curl_url_strerror(rc));
    return 0;
}

static int progress_cb(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    ppk__uploader *u = clientp;
    int a = atomic_load(&u->abort);
    if (a) u->cb_reason = a;
    return a != PPK__ABORT_NONE;
}

/* The transfer's socket is opened and closed here, so that the uploader knows it. */
static curl_socket_t open_socket_cb(void *clientp, curlsocktype purpose,
                                    struct curl_sockaddr *a) {
    (void)purpose;
    ppk__uploader *u = clientp;
    curl_socket_t fd = socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
    if (fd == CURL_SOCKET_BAD) return fd;
    pthread_mutex_lock(&u->lock);
    u->sock = fd;
    pthread_mutex_unlock(&u->lock);
    return fd;
}

static int close_socket_cb(void *clientp, curl_socket_t fd) {
    ppk__uploader *u = clientp;
    pthread_mutex_lock(&u->lock);
    if (u->sock == fd) u->sock = -1;
    pthread_mutex_unlock(&u->lock);
    return close(fd);
}

void ppk__upload_interrupt(ppk__uploader *u, int reason) {
    if (!u->in_transfer) return;
    u->interrupted = reason;
    if (u->sock >= 0) shutdown(u->sock, SHUT_RDWR);
}

/* The longest wait a Retry-After header sets before the retry. */
#define RETRY_AFTER_MAX_MS 60000

/* Keeps the first PPK__ANSWER_MAX bytes of the answer (opaque: a ppk__ubuf, or NULL to
 * keep nothing). */
static size_t answer_cb(char *p, size_t size, size_t n, void *opaque) {
    ppk__ubuf *b = opaque;
    if (b && b->len < PPK__ANSWER_MAX) {
        size_t take = PPK__ANSWER_MAX - b->len < n ? PPK__ANSWER_MAX - b->len : n;
        ppk__ubuf_add(b, p, take);
    }
    return size * n;
}

/* One transfer. Returns the curl code; *status gets the HTTP status (0 if none). */
static CURLcode perform(ppk__uploader *u, const char *url, const ppk__ubuf *body,
                        struct curl_slist *hdrs, ppk__ubuf *answer, long *status,
                        int64_t *retry_after_ms) {
    CURL *h = u->curl;
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body->p ? body->p : "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)u->cfg.connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)u->cfg.timeout_ms);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, progress_cb);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, u);
    curl_easy_setopt(h, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_socket_cb);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETDATA, u);
    curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, close_socket_cb);
    curl_easy_setopt(h, CURLOPT_CLOSESOCKETDATA, u);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, answer_cb);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, answer);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    if (u->ops.setopt) u->ops.setopt(u->ctx, h);
    u->cb_reason = PPK__ABORT_NONE;
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    *status = code;
    *retry_after_ms = 0;
#if LIBCURL_VERSION_NUM >= 0x074200 /* CURLINFO_RETRY_AFTER: 7.66 */
    curl_off_t after = 0;
    if (curl_easy_getinfo(h, CURLINFO_RETRY_AFTER, &after) == CURLE_OK && after > 0)
        *retry_after_ms = after > RETRY_AFTER_MAX_MS / 1000 ? RETRY_AFTER_MAX_MS : after * 1000;
#endif
    return rc;
}

/* The request of a job: its URL, body and headers (the configured ones, Content-Type,
 * an empty Expect:). 0, PPK_ENOMEM, or the build's PPK_EINVAL. */
static int build_request(ppk__uploader *u, ppk__upload_job *job, ppk__ubuf *url,
                         ppk__ubuf *body, struct curl_slist **hdrs) {
    char ctype[192] = "application/octet-stream";
    int rc = u->ops.build(u->ctx, job, url, body, ctype, sizeof ctype);
    if (!rc && (url->failed || body->failed)) rc = PPK_ENOMEM;
    ppk__ubuf_nul(url);
    char line[256];
    snprintf(line, sizeof line, "Content-Type: %s", ctype);
    for (size_t i = 0; i <= u->n_headers + 1 && !rc; i++) {
        const char *hl = i < u->n_headers ? u->headers[i] : i == u->n_headers ? line : "Expect:";
        struct curl_slist *n = curl_slist_append(*hdrs, hl);
        if (!n) rc = PPK_ENOMEM;
        else *hdrs = n;
    }
    return rc;
}

/* What one transfer gave: the curl code, the HTTP status, the answer's Retry-After, and
 * whether a 2xx answer said part of the data was rejected (ops.answer). */
typedef struct outcome {
    CURLcode cc;
    long status;
    int64_t retry_after_ms;
    int partial;
    uint64_t rejected;
} outcome;

static outcome transfer(ppk__uploader *u, const ppk__ubuf *url, const ppk__ubuf *body,
                        struct curl_slist *hdrs) {
    outcome o = {0};
    ppk__ubuf answer;
    ppk__ubuf_init(&answer, &u->mem);
    o.cc = perform(u, url->p, body, hdrs, u->ops.answer ? &answer : NULL, &o.status,
                   &o.retry_after_ms);
    o.partial = o.cc == CURLE_OK && o.status >= 200 && o.status < 300 && u->ops.answer &&
                !answer.failed && u->ops.answer(u->ctx, answer.p, answer.len, &o.rejected);
    ppk__ubuf_free(&answer);
    return o;
}

/* Counts a finished attempt that was not aborted, the lock held: 1 when the upload is
 * done (sent), else 0 with *retryable set. */
static int count_outcome(ppk__uploader *u, const outcome *o, size_t body_len, int *retryable) {
    CURLcode cc = o->cc;
    long status = o->status;
    *retryable = 1;
    if (cc == CURLE_OK) {
        u->st.last_http_status = (int)status;
        if (status >= 200 && status < 300) {
            u->st.sent++;
            u->st.bytes_sent += body_len;
            if (o->partial) {
                u->st.partial_successes++;
                u->st.rejected_profiles += o->rejected;
            }
            return 1;
        }
        if (status >= 400) {
            if (status >= 500) u->st.fail_http_5xx++;
            else u->st.fail_http_4xx++;
            *retryable = u->ops.retryable ? u->ops.retryable(status)
                                          : status >= 500 || status == 408 || status == 429;
        } else {
            u->st.fail_other++; /* 1xx, 3xx: redirects are not followed */
            *retryable = 0;
        }
    } else if (cc == CURLE_OPERATION_TIMEDOUT) {
        u->st.fail_timeout++;
    } else if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
               cc == CURLE_COULDNT_RESOLVE_PROXY) {
        u->st.fail_connect++;
    } else {
        u->st.fail_other++;
    }
    return 0;
}

/* What follows a transfer that ended with `o`, the lock held: 1 to send again (after a
 * fork ended it, or after the backoff that follows a first retryable failure), 0 when
 * the job is finished with (its outcome counted). */
static int next_step(ppk__uploader *u, const outcome *o, size_t body_len, int *attempt,
                     int *fork_aborts) {
    /* Ended by an abort: through the progress callback, or by its socket shut down (a
     * transport error then). */
    int aborted = o->cc == CURLE_ABORTED_BY_CALLBACK ? u->cb_reason
                  : o->cc != CURLE_OK               ? u->interrupted
                                                    : PPK__ABORT_NONE;
    if (aborted == PPK__ABORT_FORK && !u->cancel) {
        /* Aborted so that fork() finds no transfer in flight: send it again, unless forks
         * keep aborting it. */
        if (++*fork_aborts > PPK__MAX_FORK_RESTARTS) {
            u->st.fail_other++;
            u->st.dropped_failed++;
            return 0;
        }
        u->st.fork_restarts++;
        while (u->fork_pending) pthread_cond_wait(&u->wake, &u->lock);
        return 1;
    }
    if (aborted && u->cancel) {
        u->st.dropped_shutdown++;
        return 0;
    }
    int retryable;
    if (count_outcome(u, o, body_len, &retryable)) return 0;
    if (retryable && *attempt == 0 && !u->cancel) {
        *attempt = 1;
        *fork_aborts = 0; /* "in a row": a failure of its own came between */
        u->st.retries++;
        struct timespec dl;
        ppk__upload_deadline_in(&dl, o->retry_after_ms > u->cfg.retry_backoff_ms
                                         ? o->retry_after_ms
                                         : u->cfg.retry_backoff_ms);
        while (!u->cancel && pthread_cond_timedwait(&u->wake, &u->lock, &dl) != ETIMEDOUT) {
        }
        return 1; /* a cancel is seen at the top of the send loop */
    }
    u->st.dropped_failed++;
    return 0;
}

/* Sends one job: build, transfer, at most one retry. Called without the lock. */
void ppk__upload_send_job(ppk__uploader *u, ppk__upload_job *job) {
    ppk__ubuf url, body;
    ppk__ubuf_init(&url, &u->mem);
    ppk__ubuf_init(&body, &u->mem);
    struct curl_slist *hdrs = NULL;
    int rc = build_request(u, job, &url, &body, &hdrs);
    if (rc || !u->curl) {
        pthread_mutex_lock(&u->lock);
        if (rc == PPK_ENOMEM || !u->curl)
            u->st.dropped_nomem++;
        else
            u->st.dropped_invalid++;
        pthread_mutex_unlock(&u->lock);
        goto out;
    }

    int attempt = 0, fork_aborts = 0;
    for (;;) {
        pthread_mutex_lock(&u->lock);
        if (u->cancel) {
            u->st.dropped_shutdown++;
            pthread_mutex_unlock(&u->lock);
            break;
        }
        u->in_transfer = 1;
        u->interrupted = PPK__ABORT_NONE;
        u->st.attempts++;
        pthread_mutex_unlock(&u->lock);

        outcome o = transfer(u, &url, &body, hdrs);
        pthread_mutex_lock(&u->lock);
        u->in_transfer = 0;
        pthread_cond_broadcast(&u->idle);
        int again = next_step(u, &o, body.len, &attempt, &fork_aborts);
        pthread_mutex_unlock(&u->lock);
        if (!again) break;
    }
out:
    curl_slist_free_all(hdrs);
    ppk__ubuf_free(&url);
    ppk__ubuf_free(&body);
}
