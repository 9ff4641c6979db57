/* sync.c - see sync.h. */
#define _GNU_SOURCE /* PTHREAD_MUTEX_ADAPTIVE_NP */
#include "sync.h"

#include <signal.h>
#include <time.h>

#include "pprofkit.h"

int ppk__mutex_init(pthread_mutex_t *m, int spin) {
    pthread_mutexattr_t ma;
    if (pthread_mutexattr_init(&ma)) return PPK_ESYS;
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
    if (spin) pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_ADAPTIVE_NP);
#else
    (void)spin; /* a C library without them (glibc has them) */
#endif
    int rc = pthread_mutex_init(m, &ma);
    pthread_mutexattr_destroy(&ma);
    return rc ? PPK_ESYS : 0;
}

int ppk__cond_init(pthread_cond_t *c) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return PPK_ESYS;
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    if (!rc) rc = pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
    return rc ? PPK_ESYS : 0;
}

int ppk__thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
    sigset_t all, old;
    sigfillset(&all);
    sigdelset(&all, SIGSEGV);
    sigdelset(&all, SIGBUS);
    sigdelset(&all, SIGFPE);
    sigdelset(&all, SIGILL);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
