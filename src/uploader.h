/*
 * uploader.h - the uploader's internals shared by upload.c (the queue, the thread,
 * shutdown, fork handling and statistics) and upload_curl.c (sending one job with
 * libcurl). The sinks see only upload.h.
 */
#ifndef PPK_UPLOADER_H
#define PPK_UPLOADER_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "forks.h"
#include "upload.h"

/* Why `abort` is set: what the progress callback ends a transfer for. */
enum { PPK__ABORT_NONE = 0, PPK__ABORT_FORK = 1, PPK__ABORT_SHUTDOWN = 2 };

/* A transfer aborted for forks this many times in a row is dropped as failed, so that a
 * process that forks all the time does not send the same export again forever. */
#define PPK__MAX_FORK_RESTARTS 3

/* One upload sink: its configuration, its queue, its thread and curl handle, its
 * statistics; one of the process-wide list that the fork handlers walk. */
typedef struct ppk__uploader {
    ppk__mem mem; /* every allocation of the sink; shared by the exporting and uploader threads */
    size_t base_bytes; /* mem.bytes once made: the uploader's own structures */
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
    int shutting;     /* a shutdown began: its first caller stops and joins the thread */
    int shut;         /* the thread is joined and the queue empty for good */
    int shut_callers; /* threads inside upload_shutdown; destroy waits for none */
    _Atomic int abort;
    int cb_reason;    /* uploader thread only: the abort the progress callback saw */
    /* The transfer's socket (-1: none), so that an abort need not wait for the progress
     * callback: shutting the socket down (ppk__upload_interrupt) ends the transfer at
     * once; `interrupted` then says why (PPK__ABORT_*). Under lock. */
    int sock;
    int interrupted;
    CURL *curl;       /* used by the uploader thread only */
    ppk_upload_stats st;
    ppk__forkable fork; /* in the fork registry (forks.h) */
} ppk__uploader;

/* Sets *ts to ms milliseconds from now (a negative ms counts as 0) on CLOCK_MONOTONIC,
 * the clock of the uploader's conditions. */
void ppk__upload_deadline_in(struct timespec *ts, int64_t ms);

/* Ends the transfer in flight now, for `reason` (PPK__ABORT_*): the lock held. */
void ppk__upload_interrupt(ppk__uploader *u, int reason);

/* Sends one job: build, transfer, at most one retry, the outcome counted in the
 * statistics. Uploader thread only, called without the lock. */
void ppk__upload_send_job(ppk__uploader *u, ppk__upload_job *job);

#endif
