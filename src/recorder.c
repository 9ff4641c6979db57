/*
 * recorder.c - the thread-safe recorder: windows, export by swap, the background
 * exporter, statistics and fork handlers.
 *
 * Two windows: flushes (sample.c) insert into `active` under `lock`. An export takes
 * `lock`, swaps `active` with `spare` (O(1)), releases it, then encodes the retired
 * window with no lock held, hands the bytes to the caller or the sinks, resets the window
 * and, under `lock` again, keeps it as the next spare. Since flush and swap take the
 * same lock, every accepted sample is in exactly one window (G3), and nothing writes to
 * a retired window (G2). `exporting` serializes exports: the spare is the one export's
 * to use. The exporter thread exports every period_ms; it stops when thread_gen moves.
 *
 * Fork (G6): the prepare handler takes every recorder's lock, so no flush or swap is
 * halfway; the child resets its active window (the parent exports those samples), gives
 * up a window the parent was exporting (it is the parent's), re-creates the condition
 * variables other threads may have been waiting on, and restarts the exporter thread
 * lazily, on the next flush or export.
 */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include "recorder.h"

#include <string.h>
#include <time.h>

#include "compress.h"

/* ---- the registry of recorders, for fork ------------------------------------------ */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static ppk_recorder *g_recorders;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void init_conds(ppk_recorder *r) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&r->export_done, NULL);
}

static void atfork_prepare(void) {
    pthread_mutex_lock(&g_lock);
    for (ppk_recorder *r = g_recorders; r; r = r->next_global) pthread_mutex_lock(&r->lock);
}

static void atfork_parent(void) {
    for (ppk_recorder *r = g_recorders; r; r = r->next_global) pthread_mutex_unlock(&r->lock);
    pthread_mutex_unlock(&g_lock);
}

static void atfork_child(void) {
    for (ppk_recorder *r = g_recorders; r; r = r->next_global) {
        /* Threads that waited on these do not exist here. */
        init_conds(r);
        if (r->exporting) {
            /* The window being exported is the parent's; so is its memory, which a
             * thread that no longer exists was using. Leave it. */
            r->exporting = 0;
            r->spare = NULL;
        }
        /* Emptied by the next call that takes the lock (ppk__recorder_settle_locked):
         * a reset frees memory, and a user allocator's lock may be held by a thread
         * that no longer exists. */
        r->reset_pending = 1;
        r->thread_running = 0;
        r->thread_gen++;
        r->seq = 0;
        memset(&r->totals, 0, sizeof r->totals);
        pthread_mutex_unlock(&r->lock);
    }
    pthread_mutex_unlock(&g_lock);
}

static void register_atfork(void) { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }

/* ---- creation ---------------------------------------------------------------------- */

void ppk_recorder_config_init(ppk_recorder_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    ppk_profile_config_init(&cfg->profile);
    cfg->codec = PPK_CODEC_GZIP;
    cfg->export_period_ms = 60000;
    cfg->builder_keep_bytes = 64 * 1024;
    cfg->builder_max_bytes = 1024 * 1024;
}

static int add_sink_locked(ppk_recorder *r, const ppk_sink *sink) {
    if (r->n_sinks == PPK_MAX_SINKS) return PPK_EINVAL;
    r->sinks[r->n_sinks++] = *sink;
    return 0;
}

int ppk_recorder_create(const ppk_recorder_config *cfg, ppk_recorder **out) {
    if (!out) return PPK_EINVAL;
    *out = NULL;
    if (!cfg || cfg->export_period_ms <= 0 || cfg->builder_max_bytes < 4096 ||
        cfg->builder_keep_bytes > cfg->builder_max_bytes)
        return PPK_EINVAL;
    int rc = ppk__compress_check(cfg->codec, cfg->level);
    if (rc) return rc;
    if ((!cfg->out_dir.ptr && cfg->out_dir.len) || (!cfg->name.ptr && cfg->name.len))
        return PPK_ENULL;
    pthread_once(&g_once, register_atfork);

    ppk__mem mem;
    ppk__mem_init(&mem, &cfg->profile.allocator);
    ppk_recorder *r = ppk__mem_alloc(&mem, sizeof *r);
    if (!r) return PPK_ENOMEM;
    memset(r, 0, sizeof *r);
    r->mem = mem;
    r->codec = cfg->codec;
    r->level = cfg->level;
    r->period_ms = cfg->export_period_ms;
    r->builder_keep_bytes = cfg->builder_keep_bytes;
    r->builder_max_bytes = cfg->builder_max_bytes;
    ppk__mem_init(&r->enc_mem, &cfg->profile.allocator);
    ppk__pb_init(&r->pb, &r->enc_mem);
    if ((rc = ppk_profile_create(&cfg->profile, &r->active)) ||
        (rc = ppk_profile_create(&cfg->profile, &r->spare))) {
        ppk_profile_free(r->active);
        ppk__mem_free(&mem, r, sizeof *r);
        return rc;
    }
    if (cfg->out_dir.len) {
        ppk_sink file;
        ppk_str name = cfg->name.len ? cfg->name : PPK_STR("profile");
        if ((rc = ppk_sink_file(cfg->out_dir, name, &file))) {
            ppk_profile_free(r->active);
            ppk_profile_free(r->spare);
            ppk__mem_free(&mem, r, sizeof *r);
            return rc;
        }
        add_sink_locked(r, &file);
    }
    /* Flushes hold the lock for a few microseconds: a thread that finds it taken spins
     * a little before sleeping, since a futex sleep and wake-up costs more than that. */
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    pthread_mutex_init(&r->lock, &ma);
    pthread_mutexattr_destroy(&ma);
    init_conds(r);
    pthread_mutex_lock(&g_lock);
    r->next_global = g_recorders;
    g_recorders = r;
    pthread_mutex_unlock(&g_lock);
    *out = r;
    return 0;
}

int ppk_recorder_add_sink(ppk_recorder *r, const ppk_sink *sink) {
    if (!r || !sink || !sink->write) return PPK_EINVAL;
    pthread_mutex_lock(&r->lock);
    int rc = r->closed ? PPK_ECLOSED : add_sink_locked(r, sink);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

/* ---- export ------------------------------------------------------------------------ */

void ppk_export_free(ppk_export *e) {
    if (!e) return;
    ppk_bytes_free(&e->data);
    memset(e, 0, sizeof *e);
}

static double ms_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static void add_degradations(ppk_recorder_stats *to, const ppk_profile_stats *w) {
    to->strings_utf8_repaired += w->strings_utf8_repaired;
    to->strings_truncated += w->strings_truncated;
    to->stacks_truncated += w->stacks_truncated;
    to->values_saturated += w->values_saturated;
    to->strings_dropped += w->strings_dropped;
    to->labels_dropped += w->labels_dropped;
    to->label_sets_dropped += w->label_sets_dropped;
    to->stacks_dropped += w->stacks_dropped;
    to->samples_overflowed += w->samples_overflowed;
    to->timestamps_dropped += w->timestamps_dropped;
    to->endpoints_dropped += w->endpoints_dropped;
}

static void start_thread_locked(ppk_recorder *r);

/* Swaps, encodes and resets; the export goes to `out`, or to the sinks when out is
 * NULL. Holds no lock while encoding or writing. */
static int export_window(ppk_recorder *r, ppk_export *out) {
    pthread_mutex_lock(&r->lock);
    while (r->exporting) pthread_cond_wait(&r->export_done, &r->lock);
    ppk__recorder_settle_locked(r);
    r->exporting = 1;
    ppk_profile *fresh = r->spare;
    r->spare = NULL;
    pthread_mutex_unlock(&r->lock);

    if (!fresh) {
        /* After a fork, the spare may have been the parent's. The configuration is the
         * active window's, which never changes. */
        if (ppk_profile_create(&r->active->cfg, &fresh)) {
            pthread_mutex_lock(&r->lock);
            r->exporting = 0;
            r->totals.export_failures++;
            pthread_cond_broadcast(&r->export_done);
            pthread_mutex_unlock(&r->lock);
            return PPK_ENOMEM;
        }
    }

    pthread_mutex_lock(&r->lock);
    int64_t now = ppk_now_ns();
    fresh->start_ns = now;
    ppk_profile *w = r->active;
    r->active = fresh;
    uint64_t seq = ++r->seq;
    ppk_sink sinks[PPK_MAX_SINKS];
    size_t n_sinks = r->n_sinks;
    memcpy(sinks, r->sinks, n_sinks * sizeof *sinks);
    pthread_mutex_unlock(&r->lock);

    ppk_export e;
    memset(&e, 0, sizeof e);
    e.codec = r->codec;
    e.start_ns = w->start_ns;
    e.end_ns = now > w->start_ns ? now : w->start_ns;
    e.seq = seq;
    ppk_profile_stats_get(w, &e.stats);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ppk_encode_options o = {r->codec, r->level, e.start_ns, e.end_ns};
    int rc = ppk__profile_encode_with(w, &r->pb, &o, &e.data);
    /* A buffer that grew for a burst shrinks back after an ordinary window. */
    ppk__pb_shrink(&r->pb, r->pb.len);
    e.encode_ms = ms_since(&t0);
    size_t sink_failures = 0;
    e.window = w;
    if (!rc && !out)
        for (size_t i = 0; i < n_sinks; i++)
            if (sinks[i].write(sinks[i].opaque, &e) != 0) sink_failures++;
    ppk_profile_reset(w, 0);

    pthread_mutex_lock(&r->lock);
    ppk_recorder_stats *t = &r->totals;
    uint64_t n = e.stats.samples_added;
    if (rc) {
        t->export_failures++;
        t->samples_lost_export += n;
    } else {
        t->windows_exported++;
        t->samples_exported += n;
        t->export_ms_last = e.encode_ms;
        if (e.encode_ms > t->export_ms_max) t->export_ms_max = e.encode_ms;
        t->export_ms_total += e.encode_ms;
    }
    t->sink_failures += sink_failures;
    add_degradations(t, &e.stats);
    if (e.stats.memory_peak_bytes > t->window_bytes_peak)
        t->window_bytes_peak = e.stats.memory_peak_bytes;
    r->spare = w;
    r->exporting = 0;
    pthread_cond_broadcast(&r->export_done);
    pthread_mutex_unlock(&r->lock);

    e.window = NULL;
    if (out && !rc)
        *out = e;
    else
        ppk_bytes_free(&e.data);
    return rc;
}

int ppk_recorder_export(ppk_recorder *r, ppk_export *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!r) return PPK_EINVAL;
    pthread_mutex_lock(&r->lock);
    int closed = r->closed;
    pthread_mutex_unlock(&r->lock);
    return closed ? PPK_ECLOSED : export_window(r, out);
}

/* ---- the background exporter ------------------------------------------------------- */

typedef struct thread_arg {
    ppk_recorder *r;
    uint64_t gen;
} thread_arg;

static void *exporter_main(void *arg) {
    ppk_recorder *r = ((thread_arg *)arg)->r;
    uint64_t gen = ((thread_arg *)arg)->gen;
    pthread_mutex_lock(&r->lock);
    ppk__mem_free(&r->mem, arg, sizeof(thread_arg));
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (;;) {
        next.tv_sec += r->period_ms / 1000;
        next.tv_nsec += (r->period_ms % 1000) * 1000000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000;
        }
        while (r->thread_gen == gen &&
               pthread_cond_timedwait(&r->wake, &r->lock, &next) == 0) {
        }
        if (r->thread_gen != gen) break;
        pthread_mutex_unlock(&r->lock);
        export_window(r, NULL);
        pthread_mutex_lock(&r->lock);
        if (r->thread_gen != gen) break;
    }
    pthread_mutex_unlock(&r->lock);
    export_window(r, NULL); /* the last window */
    return NULL;
}

static void start_thread_locked(ppk_recorder *r) {
    thread_arg *a = ppk__mem_alloc(&r->mem, sizeof *a);
    if (!a) return;
    a->r = r;
    a->gen = ++r->thread_gen;
    if (pthread_create(&r->thread, NULL, exporter_main, a) != 0) {
        ppk__mem_free(&r->mem, a, sizeof *a);
        return;
    }
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
        r->thread_gen++;
        pthread_cond_broadcast(&r->wake);
    }
    pthread_mutex_unlock(&r->lock);
    if (running) pthread_join(t, NULL);
}

void ppk__recorder_settle_locked(ppk_recorder *r) {
    if (r->reset_pending) {
        ppk_profile_reset(r->active, 0);
        r->reset_pending = 0;
    }
    if (r->want_thread && !r->thread_running) start_thread_locked(r);
}

/* ---- endpoints, statistics, free ---------------------------------------------------- */

int ppk_recorder_set_endpoint(ppk_recorder *r, uint64_t local_root_span_id, ppk_str endpoint) {
    if (!r) return PPK_EINVAL;
    pthread_mutex_lock(&r->lock);
    ppk__recorder_settle_locked(r);
    int rc = r->closed ? PPK_ECLOSED
                       : ppk_profile_set_endpoint(r->active, local_root_span_id, endpoint);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

int ppk_recorder_add_endpoint_count(ppk_recorder *r, ppk_str endpoint, int64_t count) {
    if (!r) return PPK_EINVAL;
    pthread_mutex_lock(&r->lock);
    ppk__recorder_settle_locked(r);
    int rc = r->closed ? PPK_ECLOSED
                       : ppk_profile_add_endpoint_count(r->active, endpoint, count);
    pthread_mutex_unlock(&r->lock);
    return rc;
}

void ppk_recorder_stats_get(ppk_recorder *r, ppk_recorder_stats *st) {
    if (!st) return;
    memset(st, 0, sizeof *st);
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    if (r->reset_pending) ppk__recorder_settle_locked(r);
    *st = r->totals;
    ppk_profile_stats w;
    ppk_profile_stats_get(r->active, &w);
    st->strings = w.strings;
    st->window_bytes = w.memory_bytes;
    if (w.memory_peak_bytes > st->window_bytes_peak) st->window_bytes_peak = w.memory_peak_bytes;
    add_degradations(st, &w);
    pthread_mutex_unlock(&r->lock);
}

void ppk_recorder_free(ppk_recorder *r) {
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    int had_thread = r->thread_running;
    pthread_mutex_unlock(&r->lock);
    ppk_recorder_stop(r); /* its last export covers the last window */
    pthread_mutex_lock(&r->lock);
    if (r->reset_pending) ppk__recorder_settle_locked(r);
    int last = !had_thread && r->n_sinks &&
               (r->active->samples_added || r->active->endpoint_names.n);
    pthread_mutex_unlock(&r->lock);
    if (last) export_window(r, NULL);

    pthread_mutex_lock(&g_lock);
    for (ppk_recorder **pp = &g_recorders; *pp; pp = &(*pp)->next_global) {
        if (*pp == r) {
            *pp = r->next_global;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);

    pthread_mutex_lock(&r->lock);
    r->closed = 1;
    while (r->exporting) pthread_cond_wait(&r->export_done, &r->lock);
    for (ppk_sample *s = r->builders; s; s = s->next) atomic_store(&s->rec, NULL);
    r->builders = NULL;
    pthread_mutex_unlock(&r->lock);

    for (size_t i = 0; i < r->n_sinks; i++)
        if (r->sinks[i].destroy) r->sinks[i].destroy(r->sinks[i].opaque);
    ppk_profile_free(r->active);
    ppk_profile_free(r->spare);
    ppk__pb_destroy(&r->pb);
    pthread_cond_destroy(&r->wake);
    pthread_cond_destroy(&r->export_done);
    pthread_mutex_destroy(&r->lock);
    ppk__mem mem = r->mem;
    ppk__mem_free(&mem, r, sizeof *r);
}
