/*
 * recorder.c - the thread-safe recorder: windows, creation, statistics and fork
 * handlers; export.c exports (by swap) and runs the background exporter.
 *
 * Windows come in shards (one by default): each shard has a lock and two windows, and
 * each builder flushes (sample.c) into its shard's `active` under the shard's lock. An
 * export takes each shard's lock in turn and swaps `active` with `spare` (O(1)), then
 * encodes the retired windows into one profile with no lock held, hands the bytes to
 * the caller or the sinks, resets the windows and keeps them as the next spares. Since a
 * flush and the swap of its shard take the same lock, every accepted sample is in
 * exactly one window (G3), and nothing writes to a retired window (G2). `exporting`
 * serializes exports: the spares are the one export's to use. The exporter thread
 * exports every period_ms until it is no longer the recorder's running thread.
 *
 * Fork (G6): the prepare handler takes every recorder's lock, every shard's and the
 * function dictionary's, so no flush, swap or intern is halfway; the child keeps the
 * dictionary (its ids stay valid there); the child resets its active windows (the parent exports
 * those samples), gives up windows the parent was exporting (they are the parent's),
 * re-creates the condition variables other threads may have been waiting on, and
 * restarts the exporter thread lazily, on the next flush or export.
 */
#include "recorder.h"

#include <string.h>
#include <time.h>

#include "compress.h"
#include "sink_file.h"
#include "sync.h"
#include "upload.h"

/* ---- fork (forks.h) ----------------------------------------------------------------- */

static void lock_all(ppk_recorder *r) {
    pthread_mutex_lock(&r->lock);
    for (size_t i = 0; i < r->n_shards; i++) pthread_mutex_lock(&r->shards[i].lock);
    ppk__fdict_lock(&r->fdict);
    pthread_mutex_lock(&r->endpoints.lock);
}

static void unlock_all(ppk_recorder *r) {
    pthread_mutex_unlock(&r->endpoints.lock);
    ppk__fdict_unlock(&r->fdict);
    for (size_t i = r->n_shards; i-- > 0;) pthread_mutex_unlock(&r->shards[i].lock);
    pthread_mutex_unlock(&r->lock);
}

static ppk_recorder *of(ppk__forkable *f) {
    return (ppk_recorder *)((char *)f - offsetof(ppk_recorder, fork));
}

static void fork_prepare(ppk__forkable *f) { lock_all(of(f)); }

static void fork_parent(ppk__forkable *f) { unlock_all(of(f)); }

static void fork_child(ppk__forkable *f) {
    ppk_recorder *r = of(f);
    /* Threads that waited on these do not exist here. (A failure could not be
     * reported; glibc's never fails.) */
    ppk__cond_init(&r->wake);
    ppk__cond_init(&r->export_done);
    /* Windows an export was holding are the parent's; so is their memory, which a
     * thread that no longer exists was using. Leave them: a shard whose spare the
     * export had taken gets a new one at the next export. The same for the
     * encoder's buffer and compressor, used without a lock while encoding: the
     * child starts with new ones. */
    if (r->exporting) {
        ppk_allocator a = r->enc_mem.a;
        ppk__mem_init(&r->enc_mem, &a);
        ppk__pb_init(&r->pb, &r->enc_mem);
    }
    r->exporting = 0;
    int64_t forked_ns = ppk_now_ns(); /* (clock_gettime: async-signal-safe) */
    for (size_t i = 0; i < r->n_shards; i++) {
        ppk__shard *sh = &r->shards[i];
        /* Emptied by the next call that takes the lock (ppk__shard_settle_locked):
         * a reset frees memory, and a user allocator's lock may be held by a thread
         * that no longer exists. */
        sh->reset_pending = 1;
        sh->forked_ns = forked_ns;
        sh->flushed = sh->dropped_nomem = sh->dropped_closed = sh->dropped_stale = 0;
    }
    r->thread_running = 0;
    r->seq = 0;
    memset(&r->totals, 0, sizeof r->totals);
    r->fdict.evicted = r->fdict.refused = 0;
    r->fdict.fit = (ppk__fit_counts){0, 0};
    r->endpoints.dropped = 0;
    atomic_store(&r->settle_pending, 1);
    unlock_all(r);
}

/* ---- creation ---------------------------------------------------------------------- */

void ppk_recorder_config_init(ppk_recorder_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    ppk_profile_config_init(&cfg->profile);
    cfg->codec = PPK_CODEC_GZIP;
    cfg->export_period_ms = 60000;
    cfg->builder_keep_bytes = 64 * 1024;
    cfg->builder_max_bytes = 1024 * 1024;
    cfg->max_functions = 65536;
    cfg->max_function_bytes = 8 << 20;
    cfg->function_ttl_exports = 4;
    cfg->max_endpoints = 16384;
    cfg->max_endpoint_bytes = 1 << 20;
    cfg->endpoint_ttl_exports = 4;
}

static int add_sink_locked(ppk_recorder *r, const ppk_sink *sink) {
    if (r->n_sinks == PPK_MAX_SINKS) return PPK_EFULL;
    r->sinks[r->n_sinks++] = *sink;
    return 0;
}

/* The recorder's locks and condition variables; none is left set up on failure. Flushes
 * hold a shard's lock (and the recorder's, briefly) for about a microsecond: spinning
 * locks. */
static int init_sync(ppk_recorder *r) {
    int rc = ppk__mutex_init(&r->lock, 1);
    if (rc) return rc;
    size_t i = 0;
    while (i < r->n_shards && !(rc = ppk__mutex_init(&r->shards[i].lock, 1))) i++;
    if (!rc && !(rc = ppk__cond_init(&r->wake)) && (rc = ppk__cond_init(&r->export_done)))
        pthread_cond_destroy(&r->wake);
    if (rc) {
        while (i--) pthread_mutex_destroy(&r->shards[i].lock);
        pthread_mutex_destroy(&r->lock);
    }
    return rc;
}

static void destroy_sync(ppk_recorder *r) {
    for (size_t i = 0; i < r->n_shards; i++) pthread_mutex_destroy(&r->shards[i].lock);
    pthread_cond_destroy(&r->wake);
    pthread_cond_destroy(&r->export_done);
    pthread_mutex_destroy(&r->lock);
}

int ppk__window_create(ppk_recorder *r, const ppk_profile_config *cfg, int first,
                       ppk_profile **out) {
    int rc = ppk_profile_create(cfg, out);
    if (rc) return rc;
    (*out)->fdict = &r->fdict;
    if (!first) (*out)->strings.fit = (ppk__fit_counts){0, 0}; /* the config's, so far */
    return 0;
}

static void free_shards(ppk_recorder *r) {
    for (size_t i = 0; i < r->n_shards; i++) {
        ppk_profile_free(r->shards[i].active);
        ppk_profile_free(r->shards[i].spare);
    }
    ppk__mem_free(&r->mem, r->shards, r->n_shards * sizeof *r->shards);
    r->shards = NULL;
}

int ppk_recorder_create(const ppk_recorder_config *cfg, ppk_recorder **out) {
    if (!out) return PPK_EINVAL;
    *out = NULL;
    if (!cfg || cfg->export_period_ms <= 0 || cfg->builder_max_bytes < 4096 ||
        cfg->builder_keep_bytes > cfg->builder_max_bytes || cfg->shards > PPK__MAX_SHARDS ||
        cfg->max_functions == 0 || cfg->max_functions > PPK__FD_MAX_ENTRIES ||
        cfg->function_ttl_exports == 0 || cfg->endpoint_ttl_exports == 0)
        return PPK_EINVAL;
    int rc = ppk__compress_check(cfg->codec, cfg->level);
    if (rc) return rc;
    if ((!cfg->out_dir.ptr && cfg->out_dir.len) || (!cfg->name.ptr && cfg->name.len))
        return PPK_ENULL;

    ppk_recorder *r = PPK_MEM_NEW(&cfg->profile.allocator, ppk_recorder, mem);
    if (!r) return PPK_ENOMEM;
    r->codec = cfg->codec;
    r->level = cfg->level;
    r->period_ms = cfg->export_period_ms;
    r->builder_keep_bytes = cfg->builder_keep_bytes;
    r->builder_max_bytes = cfg->builder_max_bytes;
    ppk__mem_init(&r->enc_mem, &cfg->profile.allocator);
    ppk__pb_init(&r->pb, &r->enc_mem);
    size_t n = cfg->shards ? cfg->shards : 1;
    r->shards = ppk__mem_alloc_array(&r->mem, n, sizeof *r->shards);
    if (!r->shards) {
        PPK_MEM_DELETE(r, ppk_recorder, mem);
        return PPK_ENOMEM;
    }
    memset(r->shards, 0, n * sizeof *r->shards);
    r->n_shards = n;
    rc = ppk__fdict_init(&r->fdict, &cfg->profile.allocator, cfg->max_functions,
                         cfg->max_function_bytes, cfg->profile.max_string_len,
                         cfg->function_ttl_exports);
    int eps_rc = ppk__endpoints_init(&r->endpoints, &cfg->profile.allocator, cfg->max_endpoints,
                                     cfg->max_endpoint_bytes, cfg->endpoint_ttl_exports,
                                     cfg->profile.max_string_len);
    if (!rc) rc = eps_rc;
    for (size_t i = 0; !rc && i < n; i++)
        if (!(rc = ppk__window_create(r, &cfg->profile, i == 0, &r->shards[i].active)))
            rc = ppk__window_create(r, &cfg->profile, 0, &r->shards[i].spare);
    int sync_rc = rc ? rc : init_sync(r);
    if (!rc) rc = sync_rc;
    if (!rc && cfg->out_dir.len) {
        ppk_sink file;
        ppk_str name = cfg->name.len ? cfg->name : PPK_STR("profile");
        rc = ppk__sink_file(&cfg->profile.allocator, cfg->out_dir, name, &file);
        if (!rc) add_sink_locked(r, &file);
    }
    if (rc) {
        if (!sync_rc) destroy_sync(r);
        free_shards(r);
        ppk__fdict_destroy(&r->fdict);
        if (!eps_rc) ppk__endpoints_destroy(&r->endpoints);
        PPK_MEM_DELETE(r, ppk_recorder, mem);
        return rc;
    }
    r->fork = (ppk__forkable){NULL, PPK__FORK_RECORDER, fork_prepare, fork_parent, fork_child};
    ppk__fork_add(&r->fork);
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

/* ---- sealing ---------------------------------------------------------------------- */

void ppk_recorder_seal(ppk_recorder *r) {
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    r->sealed = 1;
    for (size_t i = 0; i < r->n_shards; i++) {
        pthread_mutex_lock(&r->shards[i].lock);
        r->shards[i].closed = 1; /* a flush now refuses, counted (sample.c) */
        pthread_mutex_unlock(&r->shards[i].lock);
    }
    pthread_mutex_unlock(&r->lock);
}

/* ---- endpoints, statistics, free ---------------------------------------------------- */

/* Endpoint counts go to the first shard's window (an export copies them from there).
 * Returns it locked (with the recorder's lock), or NULL. */
static ppk_profile *endpoint_window(ppk_recorder *r) {
    pthread_mutex_lock(&r->lock);
    ppk__recorder_settle_locked(r);
    if (r->closed) {
        pthread_mutex_unlock(&r->lock);
        return NULL;
    }
    pthread_mutex_lock(&r->shards[0].lock);
    ppk__shard_settle_locked(&r->shards[0]);
    return r->shards[0].active;
}

static void endpoint_done(ppk_recorder *r) {
    pthread_mutex_unlock(&r->shards[0].lock);
    pthread_mutex_unlock(&r->lock);
}

int ppk_recorder_set_endpoint(ppk_recorder *r, uint64_t local_root_span_id, ppk_str endpoint) {
    if (!r || local_root_span_id == 0) return PPK_EINVAL;
    if (!endpoint.ptr && endpoint.len) return PPK_ENULL;
    pthread_mutex_lock(&r->lock);
    int closed = r->closed;
    pthread_mutex_unlock(&r->lock);
    if (closed) return PPK_ECLOSED;
    return ppk__endpoints_set(&r->endpoints, local_root_span_id, endpoint);
}

int ppk_recorder_add_endpoint_count(ppk_recorder *r, ppk_str endpoint, int64_t count) {
    if (!r) return PPK_EINVAL;
    ppk_profile *w = endpoint_window(r);
    if (!w) return PPK_ECLOSED;
    int rc = ppk_profile_add_endpoint_count(w, endpoint, count);
    endpoint_done(r);
    return rc;
}

void ppk_recorder_stats_get(ppk_recorder *r, ppk_recorder_stats *st) {
    if (!st) return;
    memset(st, 0, sizeof *st);
    if (!r) return;
    pthread_mutex_lock(&r->lock);
    *st = r->totals;
    for (size_t i = 0; i < r->n_shards; i++) {
        ppk__shard *sh = &r->shards[i];
        pthread_mutex_lock(&sh->lock);
        ppk__shard_settle_locked(sh);
        ppk_profile_stats w;
        ppk_profile_stats_get(sh->active, &w);
        st->samples_flushed += sh->flushed;
        st->samples_dropped_nomem += sh->dropped_nomem;
        st->samples_dropped_closed += sh->dropped_closed;
        st->samples_dropped_stale += sh->dropped_stale;
        pthread_mutex_unlock(&sh->lock);
        st->strings += w.strings;
        st->window_bytes += w.memory_bytes;
        if (w.memory_peak_bytes > st->window_bytes_peak)
            st->window_bytes_peak = w.memory_peak_bytes;
        ppk__add_degradations(st, &w);
    }
    pthread_mutex_unlock(&r->lock);
    ppk__fdict_stats(&r->fdict, st);
    ppk__endpoints_stats(&r->endpoints, st);
}

int ppk_recorder_intern_function(ppk_recorder *r, const ppk_function *f,
                                 ppk_function_id *id) {
    if (!r) {
        if (id) *id = 0;
        return PPK_EINVAL;
    }
    return ppk__fdict_intern(&r->fdict, f, id);
}

void ppk_recorder_free(ppk_recorder *r) {
    if (!r) return;
    /* A running exporter's last export covers the last window; what is still there
     * (no exporter, or its last export could not swap) is exported now. */
    ppk_recorder_stop(r);
    int last = 0;
    lock_all(r);
    for (size_t i = 0; i < r->n_shards; i++) {
        ppk__shard *sh = &r->shards[i];
        ppk__shard_settle_locked(sh);
        last |= r->n_sinks && (sh->active->samples_added || sh->active->endpoint_names.n);
    }
    unlock_all(r);
    if (last) ppk__export_window(r, NULL);

    ppk__fork_remove(&r->fork);

    pthread_mutex_lock(&r->lock);
    r->closed = 1;
    for (size_t i = 0; i < r->n_shards; i++) {
        pthread_mutex_lock(&r->shards[i].lock);
        r->shards[i].closed = 1;
        pthread_mutex_unlock(&r->shards[i].lock);
    }
    while (r->exporting) pthread_cond_wait(&r->export_done, &r->lock);
    for (ppk_sample *s = r->builders; s; s = s->next) atomic_store(&s->rec, NULL);
    r->builders = NULL;
    pthread_mutex_unlock(&r->lock);

    ppk__upload_shutdown_sinks(r->sinks, r->n_sinks);
    for (size_t i = 0; i < r->n_sinks; i++)
        if (r->sinks[i].destroy) r->sinks[i].destroy(r->sinks[i].opaque);
    destroy_sync(r);
    free_shards(r);
    ppk__fdict_destroy(&r->fdict);
    ppk__endpoints_destroy(&r->endpoints);
    ppk__pb_destroy(&r->pb);
    PPK_MEM_DELETE(r, ppk_recorder, mem);
}
