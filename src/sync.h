/*
 * sync.h - the locks and condition variables of the recorder, its function dictionary
 * and endpoints, and the uploader, set up in one way and checked (0 or PPK_ESYS).
 */
#ifndef PPK_SYNC_H
#define PPK_SYNC_H

#include <pthread.h>

/* A mutex; with `spin`, one that a thread finding it taken spins on a little before
 * sleeping (where the platform has them): for locks held about a microsecond, where a
 * futex sleep and wake-up costs more than the wait. */
int ppk__mutex_init(pthread_mutex_t *m, int spin);

/* A condition variable whose timed waits take deadlines on CLOCK_MONOTONIC. */
int ppk__cond_init(pthread_cond_t *c);

/* pthread_create for the library's own threads (exporter, uploaders): each starts with
 * every signal blocked but those a fault raises, so that a signal sent to the process
 * reaches one of the program's threads (say, one waiting for it in sigwait() while the
 * others block it), never a library thread that would die of it or run the program's
 * handler. 0 or pthread_create's error. */
int ppk__thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

#endif
