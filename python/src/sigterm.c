/*
 * sigterm.c - the last window of a process that SIGTERM kills.
 *
 * A process killed by SIGTERM (a multiprocessing Pool's workers at terminate() or at the
 * end of its `with` block, a container being stopped) runs no exit handler: the samples
 * since its last export would be lost, uncounted. While the process's profiler runs
 * (pprofkit.start(), which the CLI uses), and if SIGTERM's disposition was the default,
 * a C handler is installed that only posts a semaphore (async-signal-safe; not a file
 * descriptor, which the program may close, dup2 over or write to: a pipe made in a
 * program started with its standard streams closed would be fds 0 and 1). A thread
 * waiting on the semaphore then stops the recorder's exporter (which exports the last
 * window to the sinks), drains the uploads (their shutdown_timeout_ms), and kills the
 * process with SIGTERM under the default disposition: its exit status is the signal's,
 * as without the profiler. A deadline thread kills it after DEATH_WAIT_MS whatever the
 * export does. Nothing waits for the main thread to run Python code (as a Python handler
 * would: a worker in a long C call would delay its death, and Pool.terminate() with it).
 * Not armed in a process whose pid is 1 (a PID namespace's init), which a signal with
 * the default disposition does not kill.
 *
 * A handler the program installs later replaces this one (signal.signal); disarming
 * restores the default only if this handler is still the one installed. A forked child
 * inherits the handler but not the thread: until the child's after-fork hook has made
 * a semaphore and a thread of its own, the handler finds another pid than the armed one
 * and lets the signal kill the process at once, as the default would.
 *
 * The profiler's stop writes the last window itself: a SIGTERM that comes from the
 * start of its stop (ppk_py_sigterm_closing) waits for it, and the recorder's close
 * kills the process once the window is out (ppk_py_sigterm_disarm); a stop that begins
 * while the thread exports waits until the thread is done. A process that exits another
 * way while the thread exports (C exit()) waits for it too (at_exit). Arming, closing,
 * disarming and the after-fork hook run with the GIL; the handler and the two threads
 * use the recorder and its sinks through the library only, and the recorder is not
 * freed before disarming has joined the thread.
 */
#include "binding.h"

#include <errno.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long after a SIGTERM the process dies at the latest, the last window out or not
 * (the uploads' shutdown_timeout_ms, 2 s by default, bounds what they add). */
#define DEATH_WAIT_MS 5000

_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the handler's atomics must be lock-free");

static struct {
    RecorderObject *owner; /* strong reference while armed; NULL: not armed */
    ppk_recorder *rec;
    sem_t wake;            /* posted by the handler (a SIGTERM) or by stop_thread */
    atomic_int term, quit; /* what wake says: a SIGTERM came; the thread is to end */
    pthread_t thread;
    atomic_int pid;        /* the process whose thread waits on wake (0: none) */
    atomic_int in_handler; /* handlers running (lock-free atomics: signal-safe) */
    /* Under lock: owner's changes (read with the GIL or the lock); the recorder's sinks
     * (ppk_py_sigterm_sinks); the thread exports; the profiler's stop exports; a
     * SIGTERM came during that stop. `done` signals the end of the thread's export. */
    pthread_mutex_t lock;
    pthread_cond_t done;
    int has_sinks;
    size_t n_uploads;
    ppk_sink uploads[PPK_PY_MAX_UPLOADS];
    int exporting, closing, pending;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .done = PTHREAD_COND_INITIALIZER};

/* Sets SIGTERM's disposition to the default. */
static void set_default(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
}

/* Kills the process with SIGTERM as the default disposition does. */
static void die(void) {
    set_default();
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &term, NULL); /* the calling thread's own */
    raise(SIGTERM);
}

static void on_sigterm(int sig) {
    (void)sig;
    int saved = errno;
    atomic_fetch_add(&g.in_handler, 1);
    if (atomic_load(&g.pid) != getpid()) die();
    atomic_store(&g.term, 1);
    if (sem_post(&g.wake)) die();
    atomic_fetch_sub(&g.in_handler, 1);
    errno = saved;
}

static void *deadline_main(void *unused) {
    (void)unused;
    struct timespec ts = {DEATH_WAIT_MS / 1000, (DEATH_WAIT_MS % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR) {
    }
    die();
    return NULL;
}

static void *term_main(void *unused) {
    (void)unused;
    /* A SIGTERM that came before the disarming is handled, as if it came alone. */
    while (!atomic_load(&g.term)) {
        if (sem_wait(&g.wake) && errno == EINTR) continue;
        if (!atomic_load(&g.term) && atomic_load(&g.quit)) return NULL; /* disarmed */
    }
    pthread_t deadline;
    if (ppk_py_thread_create(&deadline, deadline_main, NULL)) die();
    pthread_detach(deadline);
    pthread_mutex_lock(&g.lock);
    int pending = g.pending = g.closing;
    g.exporting = !pending;
    int has_sinks = g.has_sinks;
    size_t n_uploads = g.n_uploads;
    ppk_sink uploads[PPK_PY_MAX_UPLOADS];
    memcpy(uploads, g.uploads, n_uploads * sizeof *uploads);
    pthread_mutex_unlock(&g.lock);
    if (pending) return NULL; /* the stop exports, then kills the process */
    ppk_py_last_window(g.rec, has_sinks, uploads, n_uploads);
    die();
    pthread_mutex_lock(&g.lock); /* still alive: the signal is ignored in this process */
    g.exporting = 0;
    pthread_cond_broadcast(&g.done);
    pthread_mutex_unlock(&g.lock);
    return NULL;
}

/* Whether SIGTERM's handler is on_sigterm. */
static int ours(void) {
    struct sigaction cur;
    return sigaction(SIGTERM, NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
           cur.sa_handler == on_sigterm;
}

/* Whether the thread waiting for a SIGTERM is this process's (not a parent's: a fork
 * whose after-fork hook did not run). */
static int own_thread(void) { return atomic_load(&g.pid) == getpid(); }

/* A semaphore and the thread waiting on it, for this process: 0, or -1 (none). */
static int start_thread(void) {
    atomic_store(&g.term, 0);
    atomic_store(&g.quit, 0);
    if (sem_init(&g.wake, 0, 0)) return -1;
    if (ppk_py_thread_create(&g.thread, term_main, NULL)) {
        sem_destroy(&g.wake);
        return -1;
    }
    atomic_store(&g.pid, getpid());
    return 0;
}

/* Ends the thread (with the GIL released), the handler no longer installed: whether a
 * SIGTERM came. */
static int stop_thread(void) {
    atomic_store(&g.pid, 0);
    /* A handler that began before the handler was removed has posted, or killed the
     * process, once none runs. */
    while (atomic_load(&g.in_handler)) sched_yield();
    atomic_store(&g.quit, 1);
    sem_post(&g.wake);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(g.thread, NULL);
    Py_END_ALLOW_THREADS
    sem_destroy(&g.wake);
    return atomic_load(&g.term);
}

/* Not armed any more; the reference to the recorder for the caller to release. */
static PyObject *forget(void) {
    PyObject *r = (PyObject *)g.owner;
    pthread_mutex_lock(&g.lock);
    g.owner = NULL;
    g.rec = NULL;
    g.exporting = g.closing = g.pending = 0;
    pthread_mutex_unlock(&g.lock);
    return r;
}

/* Copies r's sinks for the thread (under lock). */
static void copy_sinks(RecorderObject *r) {
    pthread_mutex_lock(&g.lock);
    g.has_sinks = r->has_sinks;
    g.n_uploads = r->n_uploads;
    memcpy(g.uploads, r->uploads, r->n_uploads * sizeof *g.uploads);
    pthread_mutex_unlock(&g.lock);
}

/* A process exiting while the thread exports (C exit(), or a stop in another thread
 * left the profiler running as the interpreter ends): waits for the export, then dies
 * of the SIGTERM. */
static void at_exit(void) {
    if (!own_thread()) return;
    pthread_mutex_lock(&g.lock);
    int busy = g.owner && (g.exporting || g.pending);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DEATH_WAIT_MS / 1000 + 1;
    while (g.exporting)
        if (pthread_cond_timedwait(&g.done, &g.lock, &until)) break;
    pthread_mutex_unlock(&g.lock);
    if (busy) die();
}

int ppk_py_sigterm_arm(RecorderObject *r) {
    static int exit_hook;
    struct sigaction cur;
    if (g.owner || !r->rec || r->closing || getpid() == 1 || sigaction(SIGTERM, NULL, &cur) ||
        (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL)
        return 0;
    if (!exit_hook && atexit(at_exit)) return 0;
    exit_hook = 1;
    g.exporting = g.closing = g.pending = 0;
    g.rec = r->rec;
    copy_sinks(r);
    if (start_thread()) return 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* calls it interrupts go on */
    if (sigaction(SIGTERM, &sa, NULL)) {
        stop_thread();
        return 0;
    }
    pthread_mutex_lock(&g.lock);
    g.owner = (RecorderObject *)Py_NewRef((PyObject *)r);
    pthread_mutex_unlock(&g.lock);
    return 1;
}

void ppk_py_sigterm_sinks(RecorderObject *r) {
    if (g.owner == r && own_thread()) copy_sinks(r);
}

void ppk_py_sigterm_closing(RecorderObject *r) {
    if (!g.owner || g.owner != r || !own_thread()) return;
    /* If the thread exports the last window (then kills the process), the recorder must
     * not be stopped or freed meanwhile. (The GIL is not taken with the lock held: a
     * thread holding the GIL may wait for the lock, in ppk_py_sigterm_sinks.) */
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&g.lock);
    while (g.exporting) pthread_cond_wait(&g.done, &g.lock);
    if (g.owner == r) g.closing = 1; /* (not disarmed meanwhile by another thread) */
    pthread_mutex_unlock(&g.lock);
    Py_END_ALLOW_THREADS
}

PyObject *ppk_py_sigterm_disarm(RecorderObject *r) {
    if (!g.owner || g.owner != r) return NULL;
    if (!own_thread()) {
        /* A fork whose after-fork hook did not run: the thread is the parent's. */
        if (ours()) set_default();
        return forget();
    }
    /* The default first: a SIGTERM from now on kills the process at once. */
    if (ours()) set_default();
    int came = stop_thread();
    pthread_mutex_lock(&g.lock);
    came |= g.pending;
    pthread_mutex_unlock(&g.lock);
    if (came) die(); /* during the stop, which has written the last window */
    return forget();
}

void ppk_py_sigterm_after_fork_child(void) {
    if (!g.owner) return;
    /* The parent's thread is gone: this process gets its own, and a semaphore of its
     * own (the parent's copy may be in any state). No handler posts in this process
     * before (pid is the parent's). */
    g.lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER; /* perhaps held at the fork */
    g.done = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
    atomic_store(&g.in_handler, 0);
    g.exporting = g.closing = g.pending = 0;
    if (getpid() == 1 || start_thread()) {
        if (ours()) set_default();
        Py_XDECREF(forget());
    }
}
