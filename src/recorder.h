/*
 * recorder.h - the recorder's internals shared with sample.c.
 *
 * The recorder's lock guards the list of builders, the sinks, the export state and the
 * statistics; each shard's lock guards its windows. A flush holds its builder's shard's
 * lock for one ppk__profile_add_recs(); an export takes each shard's lock briefly to
 * swap its windows, and the recorder's lock, then each shard's, to hand the reset
 * windows back as spares. Order: the recorder's lock before any shard's, shards in
 * index order, the function dictionary's last.
 */
#ifndef PPK_RECORDER_H
#define PPK_RECORDER_H

#include <pthread.h>
#include <stdatomic.h>

#include "endpoints.h"
#include "fdict.h"
#include "forks.h"
#include "profile.h"
#include "sbuf.h"

/* A shard: the windows a group of builders flushes into, under a lock of its own. */
typedef struct ppk__shard {
    pthread_mutex_t lock;
    ppk_profile *active;
    ppk_profile *spare;   /* NULL while an export holds it */
    int reset_pending;    /* a forked child's active window is to be emptied */
    int64_t forked_ns;    /* when (ppk_now_ns): the child's window starts at the fork */
    int closed;           /* the recorder is being freed */
    uint64_t flushed, dropped_nomem, dropped_closed, dropped_stale;
    char pad_[64];        /* another shard's lock is on another cache line */
} ppk__shard;

#define PPK__MAX_SHARDS 64

struct ppk_sample {
    _Atomic(ppk_recorder *) rec; /* NULL once the recorder is freed */
    ppk__shard *shard;           /* where it flushes */
    ppk_sample *prev, *next;     /* the recorder's list of builders, under its lock */
    ppk__mem mem;                /* the builder's own memory: used by its thread only */
    ppk__sbuf sb;
    size_t keep_bytes;
    int begun;
};

struct ppk_recorder {
    pthread_mutex_t lock;      /* everything but the shards' windows; taken before them */
    ppk__mem mem;              /* the recorder's own small allocations, under lock */
    ppk__shard *shards;
    size_t n_shards, next_shard;
    atomic_int settle_pending; /* after fork: the exporter thread is to be restarted */
    ppk__mem enc_mem;          /* the encoder's buffer, one for both windows: the */
    ppk__pb pb;                /* exporting thread's (exports are serialized) */
    int exporting;             /* an export is between its swap and its hand-back */
    pthread_cond_t export_done;
    int closed;
    int sealed;                /* ppk_recorder_seal: no more builders or flushes */
    uint64_t seq;
    ppk_codec codec;
    int level;
    size_t builder_keep_bytes, builder_max_bytes;
    ppk_sink sinks[PPK_MAX_SINKS];
    size_t n_sinks;
    ppk_sample *builders;
    ppk__fdict fdict;          /* functions interned by id: a lock of its own, taken */
                               /* after a shard's (a flush resolving an id) */
    ppk__endpoints endpoints;  /* a lock of its own, taken alone (or last, at fork) */

    /* The background exporter. */
    int64_t period_ms;
    int want_thread;           /* started and not stopped: restarted after fork */
    int thread_running;
    pthread_t thread; /* the exporter: it runs while thread_running and this is it */
    pthread_cond_t wake;       /* CLOCK_MONOTONIC */

    /* Totals over exported windows (the active window's are added when read). */
    ppk_recorder_stats totals;

    ppk__forkable fork; /* in the fork registry (forks.h) */
};

/* A window of the recorder (it resolves ids in the recorder's dictionary). Every window
 * fits the same config strings: only the first (`first`: shard 0's active window at
 * creation) counts their repairs, so that the recorder counts them once. 0 or
 * ppk_profile_create's error. */
int ppk__window_create(ppk_recorder *r, const ppk_profile_config *cfg, int first,
                       ppk_profile **out);
/* One export (ppk_recorder_export without the check that the recorder is open). */
int ppk__export_window(ppk_recorder *r, ppk_export *out);
/* Adds a window's repairs and degradations to recorder statistics. */
void ppk__add_degradations(ppk_recorder_stats *to, const ppk_profile_stats *w);

/* After a fork, in the child: restarts the exporter thread if it should run. The
 * recorder's lock held. Cheap when there is nothing to do. */
void ppk__recorder_settle_locked(ppk_recorder *r);
/* After a fork, in the child: empties the shard's active window. Its lock held. */
void ppk__shard_settle_locked(ppk__shard *sh);

#endif
