/*
 * export.c - the recorder's exports: by a caller (ppk_recorder_export) or by the
 * background exporter thread, every period_ms until a stop (recorder.c says
 * how windows, shards and the swap make every accepted sample land in exactly one
 * export).
 */
#include "recorder.h"
#include "sync.h"

#include <string.h>
#include <time.h>

/* ---- export ------------------------------------------------------------------------ */

void ppk_export_free(ppk_export *e) {
    if (!e) return;
    ppk_bytes_free(&e->data);
    if (e->endpoint_counts) ppk__bytes_release((uint8_t *)(uintptr_t)e->endpoint_counts);
    memset(e, 0, sizeof *e);
}

static double ms_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

void ppk__add_degradations(ppk_recorder_stats *to, const ppk_profile_stats *w) {
#define ADD(name, what) to->name += w->name;
    PPK_REPAIRS(ADD)
    PPK_DEGRADATIONS(ADD)
#undef ADD
}

static void start_thread_locked(ppk_recorder *r);

/* Sums what the stats of several windows count (the limit is per window). */
static void add_window_stats(ppk_profile_stats *to, const ppk_profile_stats *w) {
    ppk_profile_stats sum = *to;
    uint64_t *t = (uint64_t *)(void *)&sum;
    const uint64_t *f = (const uint64_t *)(const void *)w;
    for (size_t i = 0; i < sizeof sum / sizeof(uint64_t); i++) t[i] += f[i];
    sum.memory_limit = w->memory_limit;
    *to = sum;
}

/* Swaps, encodes and resets; the export goes to `out`, or to the sinks when out is
 * NULL. Holds no lock while encoding or writing. */
/* An export in steps: wait for the one in progress (exports are serialized) and mark
 * this one as running. */
static void export_begin(ppk_recorder *r) {
    pthread_mutex_lock(&r->lock);
    while (r->exporting) pthread_cond_wait(&r->export_done, &r->lock);
    ppk__recorder_settle_locked(r);
    r->exporting = 1;
    pthread_mutex_unlock(&r->lock);
}

/* Marks the export as ended (under r->lock). */
static void export_end_locked(ppk_recorder *r) {
    r->exporting = 0;
    pthread_cond_broadcast(&r->export_done);
}

/* Each shard's spare window into fresh[], new ones where a fork left none. On failure
 * (PPK_ENOMEM) the spares are put back and the export is ended, counted as failed. */
static int take_spares(ppk_recorder *r, ppk_profile **fresh) {
    int rc = 0;
    for (size_t i = 0; i < r->n_shards; i++) {
        ppk__shard *sh = &r->shards[i];
        pthread_mutex_lock(&sh->lock);
        fresh[i] = sh->spare;
        sh->spare = NULL;
        const ppk_profile_config *cfg = &sh->active->cfg; /* never changes */
        pthread_mutex_unlock(&sh->lock);
        /* After a fork, the spare may have been the parent's. */
        if (!fresh[i] && !rc) rc = ppk__window_create(r, cfg, 0, &fresh[i]) ? PPK_ENOMEM : 0;
    }
    if (!rc) return 0;
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n_shards; i++) {
        pthread_mutex_lock(&r->shards[i].lock);
        r->shards[i].spare = fresh[i];
        pthread_mutex_unlock(&r->shards[i].lock);
    }
    r->totals.export_failures++;
    export_end_locked(r);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* Makes the fresh windows active (started at `now`); the windows they replace, which
 * the export encodes, into w[]. */
static void swap_windows(ppk_recorder *r, ppk_profile **fresh, ppk_profile **w, int64_t now) {
    for (size_t i = 0; i < r->n_shards; i++) {
        ppk__shard *sh = &r->shards[i];
        fresh[i]->start_ns = now;
        pthread_mutex_lock(&sh->lock);
        ppk__shard_settle_locked(sh);
        w[i] = sh->active;
        sh->active = fresh[i];
        pthread_mutex_unlock(&sh->lock);
    }
    /* The retired windows hold copies of their functions' strings. */
    ppk__fdict_end_epoch(&r->fdict);
}

/* The export of windows w (its time span, statistics and, unless `nowhere`, its
 * encoding) into *e. 0, or the encoder's error. */
static int make_export(ppk_recorder *r, ppk_profile **w, uint64_t seq, int64_t now,
                       int nowhere, ppk_export *e) {
    size_t n = r->n_shards;
    memset(e, 0, sizeof *e);
    e->codec = r->codec;
    e->start_ns = w[0]->start_ns; /* the earliest of the shards' windows */
    for (size_t i = 1; i < n; i++)
        if (w[i]->start_ns < e->start_ns) e->start_ns = w[i]->start_ns;
    e->end_ns = now > e->start_ns ? now : e->start_ns;
    e->seq = seq;
    for (size_t i = 0; i < n; i++) {
        ppk_profile_stats ws;
        ppk_profile_stats_get(w[i], &ws);
        add_window_stats(&e->stats, &ws);
    }
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ppk_encode_options o = {r->codec, r->level, e->start_ns, e->end_ns};
    int rc = nowhere ? 0 : ppk__profile_encode_many(w, n, &r->pb, &o, &e->data);
    /* A buffer that grew for a burst shrinks back after an ordinary window. */
    ppk__pb_shrink(&r->pb, r->pb.len);
    e->encode_ms = ms_since(&t0);
    return rc;
}

/* What the export did, into the recorder's totals (under r->lock). */
static void count_export_locked(ppk_recorder *r, const ppk_export *e, int rc, int nowhere,
                                size_t sink_failures, uint64_t counts_dropped, uint64_t peak) {
    ppk_recorder_stats *t = &r->totals;
    uint64_t added = e->stats.samples_added;
    if (nowhere) {
        t->samples_dropped_no_sink += added;
    } else if (rc) {
        t->export_failures++;
        t->samples_lost_export += added;
    } else {
        t->windows_exported++;
        t->samples_exported += added;
        t->export_ms_last = e->encode_ms;
        if (e->encode_ms > t->export_ms_max) t->export_ms_max = e->encode_ms;
        t->export_ms_total += e->encode_ms;
    }
    t->sink_failures += sink_failures;
    t->endpoints_dropped += counts_dropped;
    t->samples_lost_sink += sink_failures * added;
    ppk__add_degradations(t, &e->stats);
    if (peak > t->window_bytes_peak) t->window_bytes_peak = peak;
}

int ppk__export_window(ppk_recorder *r, ppk_export *out) {
    size_t n = r->n_shards;
    ppk_profile *fresh[PPK__MAX_SHARDS], *w[PPK__MAX_SHARDS];
    export_begin(r);
    int rc = take_spares(r, fresh);
    if (rc) return rc;
    int64_t now = ppk_now_ns();
    swap_windows(r, fresh, w, now);
    pthread_mutex_lock(&r->lock);
    uint64_t seq = ++r->seq;
    ppk_sink sinks[PPK_MAX_SINKS];
    size_t n_sinks = r->n_sinks;
    memcpy(sinks, r->sinks, n_sinks * sizeof *sinks);
    pthread_mutex_unlock(&r->lock);

    /* To the sinks, and there are none: not encoded; its samples count as dropped. */
    int nowhere = !out && !n_sinks;
    /* The registrations the samples carry go into the first window, where the encoder
     * reads them. */
    ppk__endpoints_to_windows(&r->endpoints, w, n, !nowhere);
    ppk_export e;
    rc = make_export(r, w, seq, now, nowhere, &e);
    ppk__endpoints_end_epoch(&r->endpoints);
    size_t sink_failures = 0;
    uint64_t counts_dropped = 0;
    if (!rc && !nowhere) counts_dropped = ppk__endpoint_counts_copy(w[0], &r->mem.a, &e);
    if (!rc && !out)
        for (size_t i = 0; i < n_sinks; i++)
            if (sinks[i].write(sinks[i].opaque, &e) != 0) sink_failures++;
    uint64_t peak = 0;
    for (size_t i = 0; i < n; i++) {
        if (w[i]->mem.peak > peak) peak = w[i]->mem.peak;
        ppk_profile_reset(w[i], 0);
    }

    pthread_mutex_lock(&r->lock);
    count_export_locked(r, &e, rc, nowhere, sink_failures, counts_dropped, peak);
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&r->shards[i].lock);
        r->shards[i].spare = w[i];
        pthread_mutex_unlock(&r->shards[i].lock);
    }
    export_end_locked(r);
    pthread_mutex_unlock(&r->lock);

    if (out && !rc)
        *out = e;
    else
        ppk_export_free(&e);
    return rc;
}

int ppk_recorder_export(ppk_recorder *r, ppk_export *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!r) return PPK_EINVAL;
    pthread_mutex_lock(&r->lock);
    int closed = r->closed;
    pthread_mutex_unlock(&r->lock);
    return closed ? PPK_ECLOSED : ppk__export_window(r, out);
}

/* ---- the background exporter ------------------------------------------------------- */

/* Whether the calling thread is still the recorder's exporter (the lock held). A stop
 * ends it (thread_running 0, before it joins it), and a start after that stop may make
 * another one before this one first runs: then r->thread is the other's. */
static int current_exporter(const ppk_recorder *r) {
    return r->thread_running && pthread_equal(r->thread, pthread_self());
}

static void *exporter_main(void *arg) {
    ppk_recorder *r = arg;
    pthread_mutex_lock(&r->lock);
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (;;) {
        next.tv_sec += r->period_ms / 1000;
        next.tv_nsec += (r->period_ms % 1000) * 1000000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000;
        }
        while (current_exporter(r) && pthread_cond_timedwait(&r->wake, &r->lock, &next) == 0) {
        }
        if (!current_exporter(r)) break;
        pthread_mutex_unlock(&r->lock);
        ppk__export_window(r, NULL);
        pthread_mutex_lock(&r->lock);
        if (!current_exporter(r)) break;
    }
    pthread_mutex_unlock(&r->lock);
    ppk__export_window(r, NULL); /* the last window */
    return NULL;
}

static void start_thread_locked(ppk_recorder *r) {
    /* The thread cannot read r->thread before the lock is let go: it is set by then. */
    if (ppk__thread_create(&r->thread, exporter_main, r) != 0) return;
    r->thread_running = 1;
}

int ppk_recorder_start(ppk_recorder *r) {
    if (!r) return PPK_EINVAL;
    pthread_mutex_lock(&r->lock);
    int rc = 0;
    if (r->closed) {
        rc = PPK_ECLOSED;
    } else if (!r->thread_running) {
        start_thread_locked(r);
        rc = r->thread_running ? 0 : PPK_ESYS;
    }
    if (!rc) r->want_thread = 1;
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void ppk_recorder_stop(ppk_recorder *r) {
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    r->want_thread = 0;
    int running = r->thread_running;
    pthread_t t = r->thread;
    if (running) {
        r->thread_running = 0;
        pthread_cond_broadcast(&r->wake);
    }
    pthread_mutex_unlock(&r->lock);
    if (running) pthread_join(t, NULL);
}

void ppk__recorder_settle_locked(ppk_recorder *r) {
    atomic_store(&r->settle_pending, 0);
    if (r->want_thread && !r->thread_running) start_thread_locked(r);
}

void ppk__shard_settle_locked(ppk__shard *sh) {
    if (sh->reset_pending) {
        ppk_profile_reset(sh->active, sh->forked_ns);
        sh->reset_pending = 0;
    }
}
