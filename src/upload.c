/*
 * upload.c - the uploader shared by the HTTP sinks: a bounded queue, one thread, one curl
 * handle, one retry, bounded shutdown and fork handling.
 *
 * write() (the sink interface, called by the exporting thread) copies the export into a
 * job, without any lock, then takes `lock` only to push it into a ring of queue_len
 * slots; a full ring drops its oldest job. So a write never waits for the network, and
 * the memory held is at most queue_len jobs plus the one being sent. The uploader thread
 * is started by the first write (and again by the first write in a forked child). It
 * pops a job, builds the request through the sink's ops (no lock held), and sends it
 * with the curl handle it alone uses; `in_transfer` is set around curl_easy_perform.
 * Every transfer has connect and total timeouts, CURLOPT_NOSIGNAL, no connection reuse
 * (so an idle handle holds no socket across fork), and a progress callback that aborts
 * when `abort` is set. A retryable failure is retried once after retry_backoff_ms.
 *
 * Shutdown (destroy): stop taking writes, wait up to shutdown_timeout_ms for the queue to
 * drain, then set `cancel` and `abort`, join the thread, drop and count what is left.
 *
 * Fork: the prepare handler takes each uploader's lock, sets `fork_pending` (the thread
 * starts nothing new) and `abort` (the progress callback ends a transfer), and waits up
 * to fork_timeout_ms for in_transfer to clear; it keeps the lock across fork(). In the
 * parent the thread sends the aborted job again. In the child, whose thread is gone, the
 * parent's jobs are freed, the statistics restart from zero, the conditions are made
 * anew and the thread is started again by the next write. If the wait timed out, the
 * handle is mid-transfer on a socket shared with the parent: the child abandons it.
 *
 * Statistics are kept under `lock`. Memory comes from the user's allocator through a
 * ppk__ua, whose byte counts are atomic because the exporting and the uploader threads
 * allocate concurrently.
 */
#include "upload.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- memory ------------------------------------------------------------------------ */

void *ppk__ua_alloc(ppk__ua *ua, size_t n) {
    if (!n) n = 1;
    void *p = ua->a.alloc(ua->a.opaque, n);
    if (!p) return NULL;
    size_t now = atomic_fetch_add(&ua->bytes, n) + n;
    size_t peak = atomic_load(&ua->peak);
    while (now > peak && !atomic_compare_exchange_weak(&ua->peak, &peak, now)) {
    }
    return p;
}

void ppk__ua_free(ppk__ua *ua, void *p, size_t n) {
    if (!p) return;
    if (!n) n = 1;
    atomic_fetch_sub(&ua->bytes, n);
    ua->a.free(ua->a.opaque, p, n);
}

void ppk__ubuf_init(ppk__ubuf *b, ppk__ua *ua) {
    memset(b, 0, sizeof *b);
    b->ua = ua;
}

void ppk__ubuf_free(ppk__ubuf *b) {
    ppk__ua_free(b->ua, b->p, b->cap);
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
    char *p = ppk__ua_alloc(b->ua, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    if (b->len) memcpy(p, b->p, b->len);
    ppk__ua_free(b->ua, b->p, b->cap);
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

int ppk__upload_str(ppk__mem *m, ppk_str s, const char *what, const char *forbid, char **out,
                    char *err, size_t err_len) {
    *out = NULL;
    if (!s.ptr && s.len) return ppk__upload_err(err, err_len, "%s: NULL with a length", what);
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c < 0x20 || c == 0x7f)
            return ppk__upload_err(err, err_len, "%s: control character at byte %zu", what, i);
        if (forbid && strchr(forbid, c))
            return ppk__upload_err(err, err_len, "%s: character '%c' not allowed in \"%.*s\"",
                                   what, c, (int)(s.len > 200 ? 200 : s.len), s.ptr);
    }
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

/* ---- libcurl global state ------------------------------------------------------------ */

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static CURLcode g_curl_rc = CURLE_FAILED_INIT;

static void curl_init_once(void) { g_curl_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

int ppk__upload_global_init(void) {
    pthread_once(&g_curl_once, curl_init_once);
    return g_curl_rc == CURLE_OK ? 0 : PPK_ESYS;
}

/* ---- the uploader -------------------------------------------------------------------- */

enum { ABORT_NONE = 0, ABORT_FORK = 1, ABORT_SHUTDOWN = 2 };

typedef struct uploader {
    ppk__ua ua;
    ppk_upload_config cfg;
    ppk__upload_ops ops;
    void *ctx;
    char **headers;
    size_t n_headers;

    pthread_mutex_t lock;
    pthread_cond_t wake; /* the thread: work, fork over, cancel */
    pthread_cond_t idle; /* waiters: a job finished, a transfer ended */
    ppk__upload_job **ring;
    size_t head, count;
    ppk__upload_job *current; /* popped by the thread, until it is finished with */
    int thread_running;
    pthread_t thread;
    int stopping;     /* destroy began: writes are refused */
    int cancel;       /* destroy gave up waiting: drop everything */
    int in_transfer;  /* inside curl_easy_perform */
    int fork_pending; /* between the prepare and parent handlers */
    int shut;         /* the thread is joined and the queue empty for good */
    _Atomic int abort;
    int cb_reason;    /* uploader thread only: the abort the progress callback saw */
    CURL *curl;       /* used by the uploader thread only */
    ppk_upload_stats st;
    struct uploader *next_global;
} uploader;

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static uploader *g_uploaders;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

static void deadline_in(struct timespec *ts, int64_t ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (ms < 0) ms = 0;
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void init_conds(uploader *u) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&u->wake, &ca);
    pthread_cond_init(&u->idle, &ca);
    pthread_condattr_destroy(&ca);
}

static void job_free(uploader *u, ppk__upload_job *j) {
    if (!j) return;
    ppk__ua_free(&u->ua, j->data, j->len);
    if (j->extra) ppk__ua_free(&u->ua, j->extra, j->extra_len + 1);
    ppk__ua_free(&u->ua, j, sizeof *j);
}

/* Frees every queued job (the caller holds the lock or is alone); returns how many. */
static size_t drop_queue(uploader *u) {
    size_t n = u->count;
    for (size_t i = 0; i < n; i++) job_free(u, u->ring[(u->head + i) % u->cfg.queue_len]);
    u->head = u->count = 0;
    return n;
}

static int progress_cb(void *clientp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow) {
    (void)dltotal;
    (void)dlnow;
    (void)ultotal;
    (void)ulnow;
    uploader *u = clientp;
    int a = atomic_load(&u->abort);
    if (a) u->cb_reason = a;
    return a != ABORT_NONE;
}

static size_t discard_cb(char *p, size_t size, size_t n, void *opaque) {
    (void)p;
    (void)opaque;
    return size * n;
}

/* One transfer. Returns the curl code; *status gets the HTTP status (0 if none). */
static CURLcode perform(uploader *u, const char *url, const ppk__ubuf *body,
                        struct curl_slist *hdrs, long *status) {
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
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard_cb);
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#endif
    if (u->ops.setopt) u->ops.setopt(u->ctx, h);
    u->cb_reason = ABORT_NONE;
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    *status = code;
    return rc;
}

/* Sends one job: build, transfer, at most one retry. Called without the lock. */
static void send_job(uploader *u, ppk__upload_job *job) {
    ppk__ubuf url, body;
    ppk__ubuf_init(&url, &u->ua);
    ppk__ubuf_init(&body, &u->ua);
    char ctype[192] = "application/octet-stream";
    int rc = u->ops.build(u->ctx, job, &url, &body, ctype, sizeof ctype);
    if (!rc && (url.failed || body.failed)) rc = PPK_ENOMEM;
    ppk__ubuf_nul(&url);
    struct curl_slist *hdrs = NULL;
    if (!rc) {
        char line[256];
        snprintf(line, sizeof line, "Content-Type: %s", ctype);
        for (size_t i = 0; i <= u->n_headers + 1 && !rc; i++) {
            const char *hl = i < u->n_headers ? u->headers[i] : i == u->n_headers ? line : "Expect:";
            struct curl_slist *n = curl_slist_append(hdrs, hl);
            if (!n) rc = PPK_ENOMEM;
            else hdrs = n;
        }
    }
    if (rc || !u->curl) {
        pthread_mutex_lock(&u->lock);
        if (rc == PPK_ENOMEM || !u->curl)
            u->st.dropped_nomem++;
        else
            u->st.dropped_invalid++;
        pthread_mutex_unlock(&u->lock);
        goto out;
    }

    int attempt = 0;
    for (;;) {
        pthread_mutex_lock(&u->lock);
        if (u->cancel) {
            u->st.dropped_shutdown++;
            pthread_mutex_unlock(&u->lock);
            break;
        }
        u->in_transfer = 1;
        u->st.attempts++;
        pthread_mutex_unlock(&u->lock);

        long status = 0;
        CURLcode cc = perform(u, url.p, &body, hdrs, &status);

        pthread_mutex_lock(&u->lock);
        u->in_transfer = 0;
        pthread_cond_broadcast(&u->idle);
        if (cc == CURLE_ABORTED_BY_CALLBACK && u->cb_reason == ABORT_FORK && !u->cancel) {
            /* Aborted so that fork() finds no transfer in flight: send it again. */
            u->st.fork_restarts++;
            while (u->fork_pending) pthread_cond_wait(&u->wake, &u->lock);
            pthread_mutex_unlock(&u->lock);
            continue;
        }
        if (cc == CURLE_ABORTED_BY_CALLBACK && u->cancel) {
            u->st.dropped_shutdown++;
            pthread_mutex_unlock(&u->lock);
            break;
        }
        int retryable = 1;
        if (cc == CURLE_OK) {
            u->st.last_http_status = (int)status;
            if (status >= 200 && status < 300) {
                u->st.sent++;
                u->st.bytes_sent += body.len;
                pthread_mutex_unlock(&u->lock);
                break;
            }
            if (status >= 500) {
                u->st.fail_http_5xx++;
            } else if (status >= 400) {
                u->st.fail_http_4xx++;
                retryable = status == 408 || status == 429;
            } else {
                u->st.fail_other++; /* 1xx, 3xx: redirects are not followed */
                retryable = 0;
            }
        } else if (cc == CURLE_OPERATION_TIMEDOUT) {
            u->st.fail_timeout++;
        } else if (cc == CURLE_COULDNT_CONNECT || cc == CURLE_COULDNT_RESOLVE_HOST ||
                   cc == CURLE_COULDNT_RESOLVE_PROXY) {
            u->st.fail_connect++;
        } else {
            u->st.fail_other++;
        }
        if (retryable && attempt == 0 && !u->cancel) {
            attempt = 1;
            u->st.retries++;
            struct timespec dl;
            deadline_in(&dl, u->cfg.retry_backoff_ms);
            while (!u->cancel && pthread_cond_timedwait(&u->wake, &u->lock, &dl) != ETIMEDOUT) {
            }
            pthread_mutex_unlock(&u->lock);
            continue; /* a cancel is seen at the top of the loop */
        }
        u->st.dropped_failed++;
        pthread_mutex_unlock(&u->lock);
        break;
    }
out:
    curl_slist_free_all(hdrs);
    ppk__ubuf_free(&url);
    ppk__ubuf_free(&body);
}

static void *thread_main(void *arg) {
    uploader *u = arg;
    pthread_mutex_lock(&u->lock);
    for (;;) {
        while (!u->cancel && (u->fork_pending || u->count == 0) &&
               !(u->stopping && u->count == 0))
            pthread_cond_wait(&u->wake, &u->lock);
        if (u->cancel || u->count == 0) break;
        ppk__upload_job *job = u->ring[u->head];
        u->head = (u->head + 1) % u->cfg.queue_len;
        u->count--;
        u->current = job;
        if (!u->curl) u->curl = curl_easy_init();
        pthread_mutex_unlock(&u->lock);

        send_job(u, job);

        pthread_mutex_lock(&u->lock);
        u->current = NULL;
        job_free(u, job);
        pthread_cond_broadcast(&u->idle);
    }
    pthread_cond_broadcast(&u->idle);
    pthread_mutex_unlock(&u->lock);
    return NULL;
}

/* ---- fork --------------------------------------------------------------------------- */

static void atfork_prepare(void) {
    pthread_mutex_lock(&g_lock);
    for (uploader *u = g_uploaders; u; u = u->next_global) {
        pthread_mutex_lock(&u->lock);
        u->fork_pending = 1;
        atomic_store(&u->abort, ABORT_FORK);
        struct timespec dl;
        deadline_in(&dl, u->cfg.fork_timeout_ms);
        while (u->in_transfer && pthread_cond_timedwait(&u->idle, &u->lock, &dl) != ETIMEDOUT) {
        }
        /* The lock stays held across fork(). */
    }
}

static void atfork_parent(void) {
    for (uploader *u = g_uploaders; u; u = u->next_global) {
        u->fork_pending = 0;
        atomic_store(&u->abort, u->cancel ? ABORT_SHUTDOWN : ABORT_NONE);
        pthread_cond_broadcast(&u->wake);
        pthread_mutex_unlock(&u->lock);
    }
    pthread_mutex_unlock(&g_lock);
}

static void atfork_child(void) {
    for (uploader *u = g_uploaders; u; u = u->next_global) {
        init_conds(u);
        if (u->in_transfer) {
            /* The wait timed out: the handle is in a transfer on a socket the parent
             * shares. Leave it to the parent; this process makes a new one. */
            u->curl = NULL;
            u->in_transfer = 0;
        }
        job_free(u, u->current);
        u->current = NULL;
        drop_queue(u);
        u->thread_running = 0;
        u->fork_pending = 0;
        atomic_store(&u->abort, u->cancel ? ABORT_SHUTDOWN : ABORT_NONE);
        memset(&u->st, 0, sizeof u->st);
        if (u->ops.child) u->ops.child(u->ctx);
        pthread_mutex_unlock(&u->lock);
    }
    pthread_mutex_unlock(&g_lock);
}

static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* ---- the sink interface ---------------------------------------------------------------- */

static int upload_write(void *opaque, const ppk_export *e) {
    uploader *u = opaque;
    ppk__upload_job *job = ppk__ua_alloc(&u->ua, sizeof *job);
    int rc = 0;
    if (job) {
        memset(job, 0, sizeof *job);
        job->codec = e->codec;
        job->start_ns = e->start_ns;
        job->end_ns = e->end_ns;
        job->seq = e->seq;
        job->data = ppk__ua_alloc(&u->ua, e->data.len);
        if (!job->data) {
            rc = PPK_ENOMEM;
        } else {
            job->len = e->data.len;
            if (e->data.len) memcpy(job->data, e->data.data, e->data.len);
        }
        if (!rc && u->ops.prepare) {
            ppk__ubuf extra;
            ppk__ubuf_init(&extra, &u->ua);
            rc = u->ops.prepare(u->ctx, e, &extra);
            ppk__ubuf_nul(&extra);
            if (!rc && extra.failed) rc = PPK_ENOMEM;
            if (!rc && extra.len) {
                /* Keep exactly len + 1 bytes, so the job's size is known. */
                job->extra = ppk__ua_alloc(&u->ua, extra.len + 1);
                if (job->extra) {
                    memcpy(job->extra, extra.p, extra.len + 1);
                    job->extra_len = extra.len;
                } else {
                    rc = PPK_ENOMEM;
                }
            }
            ppk__ubuf_free(&extra);
        }
    } else {
        rc = PPK_ENOMEM;
    }
    if (rc) {
        job_free(u, job);
        pthread_mutex_lock(&u->lock);
        u->st.queued++;
        if (rc == PPK_ENOMEM)
            u->st.dropped_nomem++;
        else
            u->st.dropped_invalid++;
        pthread_mutex_unlock(&u->lock);
        return rc;
    }

    ppk__upload_job *old = NULL;
    pthread_mutex_lock(&u->lock);
    u->st.queued++;
    if (u->stopping) {
        u->st.dropped_shutdown++;
        pthread_mutex_unlock(&u->lock);
        job_free(u, job);
        return PPK_ECLOSED;
    }
    if (u->count == u->cfg.queue_len) {
        old = u->ring[u->head];
        u->head = (u->head + 1) % u->cfg.queue_len;
        u->count--;
        u->st.dropped_queue_full++;
    }
    u->ring[(u->head + u->count) % u->cfg.queue_len] = job;
    u->count++;
    if (u->count > u->st.queue_peak) u->st.queue_peak = u->count;
    if (!u->thread_running) {
        if (pthread_create(&u->thread, NULL, thread_main, u) == 0)
            u->thread_running = 1;
        else
            rc = PPK_ESYS; /* the job waits; the next write tries again */
    }
    pthread_cond_broadcast(&u->wake);
    pthread_mutex_unlock(&u->lock);
    job_free(u, old);
    return rc;
}

/* Drains for at most shutdown_timeout_ms, cancels the rest, joins the thread. */
static void upload_shutdown(uploader *u) {
    pthread_mutex_lock(&u->lock);
    if (u->shut) {
        pthread_mutex_unlock(&u->lock);
        return;
    }
    u->stopping = 1;
    pthread_cond_broadcast(&u->wake);
    struct timespec dl;
    deadline_in(&dl, u->cfg.shutdown_timeout_ms);
    while (u->thread_running && (u->count || u->current) &&
           pthread_cond_timedwait(&u->idle, &u->lock, &dl) != ETIMEDOUT) {
    }
    u->cancel = 1;
    atomic_store(&u->abort, ABORT_SHUTDOWN);
    pthread_cond_broadcast(&u->wake);
    int running = u->thread_running;
    pthread_t t = u->thread;
    pthread_mutex_unlock(&u->lock);
    if (running) pthread_join(t, NULL);
    pthread_mutex_lock(&u->lock);
    u->thread_running = 0;
    u->st.dropped_shutdown += drop_queue(u);
    u->shut = 1;
    pthread_mutex_unlock(&u->lock);
}

static void upload_destroy(void *opaque) {
    uploader *u = opaque;
    upload_shutdown(u);
    pthread_mutex_lock(&g_lock);
    for (uploader **pp = &g_uploaders; *pp; pp = &(*pp)->next_global) {
        if (*pp == u) {
            *pp = u->next_global;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    if (u->curl) curl_easy_cleanup(u->curl);
    if (u->ops.free) u->ops.free(u->ctx);
    for (size_t i = 0; i < u->n_headers; i++)
        ppk__ua_free(&u->ua, u->headers[i], strlen(u->headers[i]) + 1);
    ppk__ua_free(&u->ua, u->headers, u->n_headers * sizeof *u->headers);
    ppk__ua_free(&u->ua, u->ring, u->cfg.queue_len * sizeof *u->ring);
    pthread_cond_destroy(&u->wake);
    pthread_cond_destroy(&u->idle);
    pthread_mutex_destroy(&u->lock);
    ppk__ua ua = {.a = u->ua.a};
    ppk__ua_free(&ua, u, sizeof *u);
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

int ppk__upload_create(const ppk_upload_config *cfg, const ppk__upload_ops *ops, void *ctx,
                       const char *const *headers, size_t n_headers, ppk_sink *out,
                       char *err, size_t err_len) {
    int rc = 0;
    if (!cfg->queue_len || cfg->queue_len > 1024)
        rc = ppk__upload_err(err, err_len, "upload.queue_len: %zu is not in 1..1024",
                             cfg->queue_len);
    else if (cfg->connect_timeout_ms <= 0 || cfg->timeout_ms <= 0 || cfg->retry_backoff_ms < 0 ||
             cfg->shutdown_timeout_ms < 0 || cfg->fork_timeout_ms < 0 ||
             cfg->timeout_ms > 86400000 || cfg->connect_timeout_ms > 86400000)
        rc = ppk__upload_err(err, err_len,
                             "upload: timeouts must be positive (backoff, shutdown and fork "
                             "timeouts may be 0) and at most a day");
    else if (ppk__upload_global_init())
        rc = ppk__upload_err(err, err_len, "curl_global_init failed"), rc = PPK_ESYS;
    if (rc) {
        ops->free(ctx);
        return rc;
    }
    pthread_once(&g_atfork_once, register_atfork);

    ppk__ua ua0 = {0};
    ppk__fill_allocator(&ua0.a, &cfg->allocator);
    uploader *u = ppk__ua_alloc(&ua0, sizeof *u);
    if (!u) {
        ops->free(ctx);
        return PPK_ENOMEM;
    }
    memset(u, 0, sizeof *u);
    u->ua.a = ua0.a;
    atomic_store(&u->ua.bytes, sizeof *u);
    atomic_store(&u->ua.peak, sizeof *u);
    u->cfg = *cfg;
    u->ops = *ops;
    u->ctx = ctx;
    u->ring = ppk__ua_alloc(&u->ua, cfg->queue_len * sizeof *u->ring);
    u->headers = ppk__ua_alloc(&u->ua, (n_headers ? n_headers : 1) * sizeof *u->headers);
    int ok = u->ring && u->headers;
    for (size_t i = 0; ok && i < n_headers; i++) {
        size_t n = strlen(headers[i]) + 1;
        u->headers[i] = ppk__ua_alloc(&u->ua, n);
        if (!u->headers[i]) {
            ok = 0;
            break;
        }
        memcpy(u->headers[i], headers[i], n);
        u->n_headers++;
    }
    if (!ok) {
        for (size_t i = 0; i < u->n_headers; i++)
            ppk__ua_free(&u->ua, u->headers[i], strlen(u->headers[i]) + 1);
        if (u->headers)
            ppk__ua_free(&u->ua, u->headers, (n_headers ? n_headers : 1) * sizeof *u->headers);
        ppk__ua_free(&u->ua, u->ring, cfg->queue_len * sizeof *u->ring);
        ops->free(ctx);
        ppk__ua_free(&ua0, u, sizeof *u);
        return PPK_ENOMEM;
    }
    if (!n_headers) {
        ppk__ua_free(&u->ua, u->headers, sizeof *u->headers);
        u->headers = NULL;
    }
    pthread_mutex_init(&u->lock, NULL);
    init_conds(u);
    pthread_mutex_lock(&g_lock);
    u->next_global = g_uploaders;
    g_uploaders = u;
    pthread_mutex_unlock(&g_lock);
    out->write = upload_write;
    out->destroy = upload_destroy;
    out->opaque = u;
    return 0;
}

/* ---- public getters ------------------------------------------------------------------ */

static uploader *as_uploader(const ppk_sink *s) {
    return s && s->write == upload_write && s->opaque ? s->opaque : NULL;
}

int ppk_sink_upload_stats(const ppk_sink *sink, ppk_upload_stats *st) {
    uploader *u = as_uploader(sink);
    if (!st) return PPK_EINVAL;
    memset(st, 0, sizeof *st);
    if (!u) return PPK_EINVAL;
    pthread_mutex_lock(&u->lock);
    *st = u->st;
    st->queue_len = u->count;
    st->memory_bytes = atomic_load(&u->ua.bytes);
    st->memory_peak_bytes = atomic_load(&u->ua.peak);
    pthread_mutex_unlock(&u->lock);
    return 0;
}

int ppk_sink_upload_shutdown(const ppk_sink *sink) {
    uploader *u = as_uploader(sink);
    if (!u) return PPK_EINVAL;
    upload_shutdown(u);
    return 0;
}

int ppk_sink_upload_flush(const ppk_sink *sink, int64_t timeout_ms) {
    uploader *u = as_uploader(sink);
    if (!u) return PPK_EINVAL;
    pthread_mutex_lock(&u->lock);
    struct timespec dl;
    deadline_in(&dl, timeout_ms);
    int rc = 0;
    while (u->thread_running && (u->count || u->current)) {
        if (pthread_cond_timedwait(&u->idle, &u->lock, &dl) == ETIMEDOUT) {
            rc = (u->count || u->current) ? PPK_ESYS : 0;
            break;
        }
    }
    pthread_mutex_unlock(&u->lock);
    return rc;
}
