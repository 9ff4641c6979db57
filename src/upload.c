/*
 * upload.c - the uploader shared by the HTTP sinks: a bounded queue, one thread,
 * bounded shutdown, fork handling and statistics. Sending one job (the libcurl transfer,
 * its timeouts and its one retry) is in upload_curl.c; the counted allocator, the byte
 * buffer and the configuration helpers the sinks use in upload_util.c; the uploader's
 * fields are in uploader.h.
 *
 * write() (the sink interface, called by the exporting thread) copies the export into a
 * job, without any lock, then takes `lock` only to push it into a ring of queue_len
 * slots; a full ring drops its oldest job. So a write never waits for the network, and
 * the memory held is at most queue_len jobs plus the one being sent. The uploader thread
 * is started by the first write (and again by the first write in a forked child); if it
 * cannot be (pthread_create fails), the job stays queued and write still returns 0: the
 * job is the sink's, sent once a later write or flush starts the thread, or dropped by
 * shutdown, and counted either way. The thread pops a job and, with no lock held, hands
 * it to ppk__upload_send_job(), which builds the request through the sink's ops and
 * sends it with the curl handle the thread alone uses.
 *
 * Shutdown (destroy): stop taking writes, wait up to shutdown_timeout_ms for the queue to
 * drain, then set `cancel` and `abort`, join the thread, drop and count what is left. The
 * first caller does it (`shutting`); callers that overlap it wait until it is done
 * (`shut`); destroy also waits for them to leave (`shut_callers`) before freeing.
 *
 * Fork: the prepare handler takes each uploader's lock, sets `fork_pending` (the thread
 * starts nothing new) and `abort` (the progress callback ends a transfer), and waits up
 * to fork_timeout_ms for in_transfer to clear; it keeps the lock across fork(). In the
 * parent the thread sends the aborted job again. In the child, whose thread is gone, the
 * parent's jobs are freed, the statistics restart from zero, the conditions are made
 * anew and the thread is started again by the next write. If the wait timed out, the
 * handle is mid-transfer on a socket shared with the parent: the child abandons it.
 *
 * Statistics are kept under `lock`. Memory comes from the user's allocator through the
 * uploader's ppk__mem, whose byte counts are atomic: the exporting and the uploader
 * threads allocate concurrently.
 */
#include "sync.h"
#include "uploader.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the uploader -------------------------------------------------------------------- */

void ppk__upload_deadline_in(struct timespec *ts, int64_t ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    if (ms < 0) ms = 0;
    ts->tv_sec += (time_t)(ms / 1000);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* The uploader's lock and condition variables; none is left set up on failure. */
static int init_sync(ppk__uploader *u) {
    int rc = ppk__mutex_init(&u->lock, 0);
    if (rc) return rc;
    if (!(rc = ppk__cond_init(&u->wake)) && (rc = ppk__cond_init(&u->idle)))
        pthread_cond_destroy(&u->wake);
    if (rc) pthread_mutex_destroy(&u->lock);
    return rc;
}

static void job_free(ppk__uploader *u, ppk__upload_job *j) {
    if (!j) return;
    ppk__mem_free(&u->mem, j->data, j->len);
    if (j->extra) ppk__mem_free(&u->mem, j->extra, j->extra_len + 1);
    ppk__mem_free(&u->mem, j, sizeof *j);
}

/* Frees every queued job (the caller holds the lock or is alone); returns how many. */
static size_t drop_queue(ppk__uploader *u) {
    size_t n = u->count;
    for (size_t i = 0; i < n; i++) job_free(u, u->ring[(u->head + i) % u->cfg.queue_len]);
    u->head = u->count = 0;
    return n;
}

static void *thread_main(void *arg) {
    ppk__uploader *u = arg;
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

        ppk__upload_send_job(u, job);

        pthread_mutex_lock(&u->lock);
        u->current = NULL;
        job_free(u, job);
        pthread_cond_broadcast(&u->idle);
    }
    pthread_cond_broadcast(&u->idle);
    pthread_mutex_unlock(&u->lock);
    return NULL;
}

/* Starts the uploader thread unless it runs (the lock held). Never once stopping:
 * shutdown may have looked for the thread to join already. @return 0, or PPK_ESYS with
 * errno set to pthread_create's error. */
static int start_thread_locked(ppk__uploader *u) {
    assert(!u->stopping);
    if (u->thread_running) return 0;
    int err = ppk__thread_create(&u->thread, thread_main, u);
    if (err) {
        errno = err;
        return PPK_ESYS;
    }
    u->thread_running = 1;
    return 0;
}

/* ---- fork (forks.h) ------------------------------------------------------------------- */

static ppk__uploader *of(ppk__forkable *f) {
    return (ppk__uploader *)((char *)f - offsetof(ppk__uploader, fork));
}

static void fork_prepare(ppk__forkable *f) {
    ppk__uploader *u = of(f);
    pthread_mutex_lock(&u->lock);
    u->fork_pending = 1;
    atomic_store(&u->abort, PPK__ABORT_FORK);
    ppk__upload_interrupt(u, PPK__ABORT_FORK);
    struct timespec dl;
    ppk__upload_deadline_in(&dl, u->cfg.fork_timeout_ms);
    while (u->in_transfer && pthread_cond_timedwait(&u->idle, &u->lock, &dl) != ETIMEDOUT) {
    }
    /* The lock stays held across fork(). */
}

static void fork_parent(ppk__forkable *f) {
    ppk__uploader *u = of(f);
    u->fork_pending = 0;
    atomic_store(&u->abort, u->cancel ? PPK__ABORT_SHUTDOWN : PPK__ABORT_NONE);
    pthread_cond_broadcast(&u->wake);
    pthread_mutex_unlock(&u->lock);
}

static void fork_child(ppk__forkable *f) {
    ppk__uploader *u = of(f);
    /* Threads that waited on these do not exist here. (A failure could not be
     * reported; glibc's never fails.) */
    ppk__cond_init(&u->wake);
    ppk__cond_init(&u->idle);
    if (u->in_transfer) {
        /* The wait timed out: the handle is in a transfer on a socket the parent
         * shares. Leave it to the parent; this process makes a new one. */
        u->curl = NULL;
        u->in_transfer = 0;
    }
    u->sock = -1; /* the parent's, if any */
    job_free(u, u->current);
    u->current = NULL;
    drop_queue(u);
    /* What else is counted was the parent's uploader thread's at the fork: a request in
     * the making (its URL, body, answer). Its copy here is out of reach (the thread's
     * locals are gone) and never freed; it is not this process's to count. */
    atomic_store(&u->mem.bytes, u->base_bytes);
    u->thread_running = 0;
    u->fork_pending = 0;
    /* A shutdown in progress in the parent (its callers are not in this process) is
     * complete here: no thread, nothing queued. */
    if (u->shutting) u->shut = 1;
    u->shut_callers = 0;
    atomic_store(&u->abort, u->cancel ? PPK__ABORT_SHUTDOWN : PPK__ABORT_NONE);
    memset(&u->st, 0, sizeof u->st);
    if (u->ops.child) u->ops.child(u->ctx);
    pthread_mutex_unlock(&u->lock);
}

/* ---- the sink interface ---------------------------------------------------------------- */

static int upload_write(void *opaque, const ppk_export *e) {
    ppk__uploader *u = opaque;
    ppk__upload_job *job = ppk__mem_alloc(&u->mem, sizeof *job);
    int rc = 0;
    if (job) {
        memset(job, 0, sizeof *job);
        job->codec = e->codec;
        job->start_ns = e->start_ns;
        job->end_ns = e->end_ns;
        job->seq = e->seq;
        job->data = ppk__mem_alloc(&u->mem, e->data.len);
        if (!job->data) {
            rc = PPK_ENOMEM;
        } else {
            job->len = e->data.len;
            if (e->data.len) memcpy(job->data, e->data.data, e->data.len);
        }
        if (!rc && u->ops.prepare) {
            ppk__ubuf extra;
            ppk__ubuf_init(&extra, &u->mem);
            rc = u->ops.prepare(u->ctx, e, &extra);
            ppk__ubuf_nul(&extra);
            if (!rc && extra.failed) rc = PPK_ENOMEM;
            if (!rc && extra.len) {
                /* Keep exactly len + 1 bytes, so the job's size is known. */
                job->extra = ppk__mem_alloc(&u->mem, extra.len + 1);
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
    /* Without a thread the job waits, queued and the sink's to count: the next write or
     * flush tries again, or shutdown drops it. */
    start_thread_locked(u);
    pthread_cond_broadcast(&u->wake);
    pthread_mutex_unlock(&u->lock);
    job_free(u, old);
    return 0;
}

/* A shutdown in three steps, so that several uploaders can be stopped at once
 * (ppk__upload_shutdown_sinks): begin (writes refused, the drain's deadline set), drain
 * (wait for the queue until the deadline, then cancel), join (the thread; count what is
 * left). Exactly one caller (the first: shutdown_begin returns 1) does them; a concurrent
 * caller waits in shutdown_wait until it is done, so the thread is joined once. Each
 * caller was counted in `shut_callers` (shutdown_enter), for destroy; shutdown_join and
 * shutdown_wait count it out. */
static int shutdown_begin(ppk__uploader *u, struct timespec *deadline) {
    pthread_mutex_lock(&u->lock);
    int first = !u->shutting;
    if (first) {
        u->shutting = 1;
        u->stopping = 1;
        pthread_cond_broadcast(&u->wake);
        ppk__upload_deadline_in(deadline, u->cfg.shutdown_timeout_ms);
    }
    pthread_mutex_unlock(&u->lock);
    return first;
}

static void shutdown_drain(ppk__uploader *u, const struct timespec *deadline) {
    pthread_mutex_lock(&u->lock);
    while (u->thread_running && (u->count || u->current) &&
           pthread_cond_timedwait(&u->idle, &u->lock, deadline) != ETIMEDOUT) {
    }
    u->cancel = 1;
    atomic_store(&u->abort, PPK__ABORT_SHUTDOWN);
    ppk__upload_interrupt(u, PPK__ABORT_SHUTDOWN);
    pthread_cond_broadcast(&u->wake);
    pthread_mutex_unlock(&u->lock);
}

static void shutdown_join(ppk__uploader *u) {
    pthread_mutex_lock(&u->lock);
    int running = u->thread_running;
    pthread_t t = u->thread;
    pthread_mutex_unlock(&u->lock);
    if (running) pthread_join(t, NULL);
    pthread_mutex_lock(&u->lock);
    u->thread_running = 0;
    u->st.dropped_shutdown += drop_queue(u);
    u->shut = 1;
    u->shut_callers--;
    pthread_cond_broadcast(&u->idle);
    pthread_mutex_unlock(&u->lock);
}

static void shutdown_wait(ppk__uploader *u) {
    pthread_mutex_lock(&u->lock);
    while (!u->shut) pthread_cond_wait(&u->idle, &u->lock);
    u->shut_callers--;
    pthread_cond_broadcast(&u->idle);
    pthread_mutex_unlock(&u->lock);
}

/* Drains for at most shutdown_timeout_ms, cancels the rest, joins the thread. */
static void upload_shutdown(ppk__uploader *u) {
    struct timespec dl;
    if (!shutdown_begin(u, &dl)) {
        shutdown_wait(u);
        return;
    }
    shutdown_drain(u, &dl);
    shutdown_join(u);
}

static void count_caller(ppk__forkable *f) {
    ppk__uploader *u = of(f);
    pthread_mutex_lock(&u->lock);
    u->shut_callers++;
    pthread_mutex_unlock(&u->lock);
}

/* Counts a shutdown caller in, if `u` is a live uploader (still listed: destroy unlists
 * it before it waits for the callers, so a caller either is counted or never touches it).
 * @return 1 if counted. */
static int shutdown_enter(ppk__uploader *u) { return ppk__fork_if_listed(&u->fork, count_caller); }

static void upload_destroy(void *opaque) {
    ppk__uploader *u = opaque;
    if (shutdown_enter(u)) upload_shutdown(u);
    ppk__fork_remove(&u->fork);
    /* A ppk_sink_upload_shutdown that overlapped this one may still be waking up. */
    pthread_mutex_lock(&u->lock);
    while (u->shut_callers) pthread_cond_wait(&u->idle, &u->lock);
    pthread_mutex_unlock(&u->lock);
    if (u->curl) curl_easy_cleanup(u->curl);
    if (u->ops.free) u->ops.free(u->ctx);
    for (size_t i = 0; i < u->n_headers; i++)
        ppk__mem_free(&u->mem, u->headers[i], strlen(u->headers[i]) + 1);
    ppk__mem_free(&u->mem, u->headers, u->n_headers * sizeof *u->headers);
    ppk__mem_free(&u->mem, u->ring, u->cfg.queue_len * sizeof *u->ring);
    pthread_cond_destroy(&u->wake);
    pthread_cond_destroy(&u->idle);
    pthread_mutex_destroy(&u->lock);
    PPK_MEM_DELETE(u, ppk__uploader, mem);
}

int ppk__upload_create(const ppk_upload_config *cfg, const ppk__upload_ops *ops, void *ctx,
                       const char *const *headers, size_t n_headers, ppk_sink *out,
                       char *err, size_t err_len) {
    int rc = ppk__upload_check_config(cfg, err, err_len);
    if (!rc && ppk__upload_global_init())
        rc = ppk__upload_err(err, err_len, "curl_global_init failed"), rc = PPK_ESYS;
    if (rc) {
        ops->free(ctx);
        return rc;
    }
    ppk__uploader *u = PPK_MEM_NEW(&cfg->allocator, ppk__uploader, mem);
    if (!u) {
        ops->free(ctx);
        return PPK_ENOMEM;
    }
    u->sock = -1;
    u->cfg = *cfg;
    u->ops = *ops;
    u->ctx = ctx;
    u->ring = ppk__mem_alloc(&u->mem, cfg->queue_len * sizeof *u->ring);
    u->headers = ppk__mem_alloc(&u->mem, (n_headers ? n_headers : 1) * sizeof *u->headers);
    rc = u->ring && u->headers ? 0 : PPK_ENOMEM;
    for (size_t i = 0; !rc && i < n_headers; i++) {
        size_t n = strlen(headers[i]) + 1;
        u->headers[i] = ppk__mem_alloc(&u->mem, n);
        if (!u->headers[i]) {
            rc = PPK_ENOMEM;
            break;
        }
        memcpy(u->headers[i], headers[i], n);
        u->n_headers++;
    }
    if (!rc) rc = init_sync(u);
    if (rc) {
        for (size_t i = 0; i < u->n_headers; i++)
            ppk__mem_free(&u->mem, u->headers[i], strlen(u->headers[i]) + 1);
        if (u->headers)
            ppk__mem_free(&u->mem, u->headers, (n_headers ? n_headers : 1) * sizeof *u->headers);
        ppk__mem_free(&u->mem, u->ring, cfg->queue_len * sizeof *u->ring);
        ops->free(ctx);
        PPK_MEM_DELETE(u, ppk__uploader, mem);
        return rc;
    }
    if (!n_headers) {
        ppk__mem_free(&u->mem, u->headers, sizeof *u->headers);
        u->headers = NULL;
    }
    u->base_bytes = atomic_load(&u->mem.bytes);
    u->fork = (ppk__forkable){NULL, PPK__FORK_UPLOADER, fork_prepare, fork_parent, fork_child};
    ppk__fork_add(&u->fork);
    out->write = upload_write;
    out->destroy = upload_destroy;
    out->opaque = u;
    return 0;
}

/* ---- public getters ------------------------------------------------------------------ */

static ppk__uploader *as_uploader(const ppk_sink *s) {
    return s && s->write == upload_write && s->opaque ? s->opaque : NULL;
}

int ppk_sink_upload_stats(const ppk_sink *sink, ppk_upload_stats *st) {
    ppk__uploader *u = as_uploader(sink);
    if (!st) return PPK_EINVAL;
    memset(st, 0, sizeof *st);
    if (!u) return PPK_EINVAL;
    pthread_mutex_lock(&u->lock);
    *st = u->st;
    st->queue_len = u->count;
    st->memory_bytes = atomic_load(&u->mem.bytes);
    st->memory_peak_bytes = atomic_load(&u->mem.peak);
    pthread_mutex_unlock(&u->lock);
    return 0;
}

void ppk__upload_shutdown_sinks(const ppk_sink *sinks, size_t n) {
    enum { BATCH = 16 }; /* a recorder's sink table (PPK_MAX_SINKS): one batch */
    for (size_t base = 0; base < n; base += BATCH) {
        ppk__uploader *mine[BATCH], *others[BATCH];
        struct timespec dl[BATCH];
        size_t n_mine = 0, n_others = 0;
        for (size_t i = base; i < n && i < base + BATCH; i++) {
            ppk__uploader *u = as_uploader(&sinks[i]);
            if (!u || !shutdown_enter(u)) continue;
            if (shutdown_begin(u, &dl[n_mine]))
                mine[n_mine++] = u;
            else
                others[n_others++] = u; /* another caller is shutting it down */
        }
        /* The deadlines run together: the drains take the longest timeout. */
        for (size_t i = 0; i < n_mine; i++) shutdown_drain(mine[i], &dl[i]);
        for (size_t i = 0; i < n_mine; i++) shutdown_join(mine[i]);
        for (size_t i = 0; i < n_others; i++) shutdown_wait(others[i]);
    }
}

int ppk_sink_upload_shutdown(const ppk_sink *sink) {
    ppk__uploader *u = as_uploader(sink);
    if (!u) return PPK_EINVAL;
    if (!shutdown_enter(u)) return PPK_ECLOSED; /* destroyed */
    upload_shutdown(u);
    return 0;
}

int ppk_sinks_upload_shutdown(const ppk_sink *sinks, size_t n) {
    if (!sinks && n) return PPK_ENULL;
    ppk__upload_shutdown_sinks(sinks, n);
    return 0;
}

int ppk_sink_upload_flush(const ppk_sink *sink, int64_t timeout_ms) {
    ppk__uploader *u = as_uploader(sink);
    if (!u) return PPK_EINVAL;
    pthread_mutex_lock(&u->lock);
    struct timespec dl;
    ppk__upload_deadline_in(&dl, timeout_ms);
    int rc = 0;
    while (u->count || u->current) {
        /* Jobs queued with no thread (its creation failed): try again. Once stopping,
         * shutdown drops them and signals `idle`. */
        if (!u->stopping && (rc = start_thread_locked(u))) break;
        if (pthread_cond_timedwait(&u->idle, &u->lock, &dl) == ETIMEDOUT) {
            rc = (u->count || u->current) ? PPK_ETIMEDOUT : 0;
            break;
        }
    }
    pthread_mutex_unlock(&u->lock);
    return rc;
}
