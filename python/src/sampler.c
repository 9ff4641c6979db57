/*
 * sampler.c - pprofkit._native.Sampler: a native thread that samples every Python
 * thread of the interpreter at a fixed rate into a Recorder.
 *
 * The thread is a raw pthread (so that gevent's monkey-patching cannot make it a
 * greenlet) with a thread state of its own. It wakes on absolute CLOCK_MONOTONIC
 * deadlines; a tick has three phases:
 *
 *   0. Without the GIL (ppk_py_prepare): each thread of the previous pass whose CPU
 *      clock has not moved since gets its previous frames copied into this pass; the
 *      others are running, and that reading is their CPU clock at this tick if the GIL
 *      comes within CPU_FRESH_NS, else their clocks are read again in phase 2.
 *   1. With the GIL: walk every thread state (PyInterpreterState_ThreadHead,
 *      PyThreadState_Next) and its interpreter frames (read directly, internals.c: the
 *      public PyFrame_GetBack would make a frame object for each) and note, per frame,
 *      the UTF-8 of the code's co_qualname and co_filename (PyUnicode_AsUTF8AndSize,
 *      cached in the str) and the line (PyCode_Addr2Line), through a cache keyed by
 *      (code, instruction), holding a reference to each code object; per thread,
 *      its ident, native id, name, the asyncio task it is running and the labels of
 *      pprofkit.tag(). Nothing here runs Python code (which could let the GIL go
 *      mid-walk): attributes are read only through types whose attribute lookup is
 *      the generic one (before a __getattr__, which is not called) and that define no
 *      descriptor of that name (safe_getattr), and
 *      the only call is _asyncio.Task.get_name, a C function (whose first call on an
 *      unnamed task on 3.12 and 3.13 checks for signals: internals.c,
 *      ppk_py_checks_begin).
 *      A thread whose CPU clock (read here again) still has not moved takes its copy
 *      from phase 0 instead of being walked (sampler_walk.c). A thread's name is read
 *      again every NAME_REFRESH passes.
 *   2. Without the GIL: per thread, one sample pushed into the recorder (the library
 *      copies the strings; CPU time from the clock read in phase 0 or 1, or here for a
 *      thread phase 0 found running when the GIL came late), and flushed.
 *      The references taken in phase 1 keep every string alive; they are released at
 *      the end of the next phase 1 (or at stop), with the GIL.
 *
 * So the GIL is held only for the walk, and no pprofkit lock is ever held while the
 * thread waits for the GIL.
 *
 * The main thread is sampled from inside itself. A thread that runs Python code and
 * then blocks (an event loop alternating task steps and select()) releases the GIL
 * when it blocks, so a sampler that takes the GIL would always find it blocked, and
 * charge it the CPU time of the steps. So at each tick the sampler also asks, with
 * Py_AddPendingCall, for main_callback() to run in the main thread at its next
 * bytecode boundary: if the main thread is running Python code, it samples itself
 * there within microseconds (and the sampler's pass skips it); if it is blocked, the
 * callback has not run when the sampler's pass comes, which then samples it where it
 * blocks and cancels the callback. Pending calls run in the main thread only, so other
 * threads that alternate Python code and blocking calls are seen when they block. (On
 * CPython 3.11 and 3.12, internals.c makes the main thread notice the request.) When
 * the main thread was the only Python thread at its previous answer, the sampler skips
 * phases 0 to 2 (skip_pass): taking the GIL from a running main thread would only make
 * it wait, twice. If it holds the GIL and no asyncio task was there, the sampler does
 * not wait for this answer (a wake-up saved; a thread started since is sampled from the
 * next tick on); else it waits up to ANSWER_WAIT_NS for it (the callback reads the
 * tasks; a blocked main thread does not answer, and the pass samples it where it
 * blocks) and skips only if still alone. When the
 * sampler does take the GIL, it also asks the main thread (a second pending call,
 * yield_gil) to hand it over: an event loop that lets the GIL go only for moments
 * would otherwise keep it from the sampler for seconds (yield_gil explains why). Other
 * threads that hold the GIL give it up at CPython's forced switch (every 5 ms), or later
 * when many compete.
 *
 * At stop the thread runs a last pass before it ends (not by the GIL's holder): every
 * thread gets its time since its last sample, the one stopping the sampler on that
 * sample's stack (sampler_walk.c: gather_stopper).
 *
 * During phase 2 the recorder counts the sampler as busy, so Recorder.close() waits for
 * it; a recorder closed under the sampler ends its thread (stop() still joins it).
 *
 * Every started sampler is listed: the package's atexit handler stops them all before
 * the interpreter finalizes (a thread that takes the GIL during finalization is ended by
 * CPython), and its fork handler makes them all forget their thread in a child.
 *
 * Values: wall time is the time since the thread's previous sample (so a tick that the
 * GIL delayed weighs what it covered; a thread seen for the first time gets the time
 * since the previous tick, when it was not there yet), CPU time the growth of the
 * thread's CPU clock, count 1; the CPU time of a thread found blocking goes to its last
 * stack found running instead (sampler_record.c, runs_now, and for the main thread
 * ppk_py_main_deltas).
 *
 * Version-specific details live in one place each: the thread state's thread_id and
 * native_thread_id fields and the code object's co_qualname / co_filename /
 * co_firstlineno (the same in 3.11, 3.12 and 3.13), and asyncio's internals, which are
 * read only through names all three versions have: asyncio.tasks._current_tasks (the
 * task each running loop is stepping) and a loop's _thread_id (the thread running it).
 *
 * asyncio tasks that wait (asyncio_tasks=True) get samples of their own, read in phase 1
 * after the threads and recorded in phase 2 (sampler_tasks.c explains how). When the
 * main thread is alone and there are tasks, the sampler leaves them to main_callback
 * (cb_tasks: the sampler waits for its answer meanwhile, so the two never touch the
 * task table at once), and takes no GIL either; the task a callback's sample shows
 * running is not sampled as waiting by the pass of the same tick. At stop, what the
 * tasks accumulated is recorded before the recorder's last window.
 *
 * Fork: the thread does not exist in a child. The module's _after_fork_child (the
 * package's os.register_at_fork handler) makes every sampler forget it; the sampler's
 * own _after_fork_child() then starts a new one if it ran. Pending calls the child
 * inherits find no sampler until then (child_forgets_callbacks), and no yield_gil is
 * in progress at the fork (ppk_py_samplers_before_fork).
 *
 * Files: sampler.h (the data of a tick, the object), sampler_walk.c (phase 1),
 * sampler_record.c (phase 2), sampler_tasks.h, sampler_tasks.c and
 * sampler_task_read.c (asyncio tasks that wait), this file (the thread, the main
 * thread's callback, start, stop, fork, the Python type).
 */
#include "sampler.h"

#include <errno.h>

/* The sampler whose main_callback runs (GIL-protected): a pending call cannot be taken
 * back, so the callback finds its sampler here, and nothing once it stopped. A forked
 * child inherits the parent's queue of pending calls, and runs them at its first
 * bytecode boundaries, in the at-fork handlers that run before the package's: there,
 * main_callback would sample the child with the parent's clocks (a wall time from
 * before the fork) and take sp->lock, which a thread of the parent may have held at the
 * fork. So the child forgets the sampler inside fork() (child_forgets_callbacks), and
 * its callbacks do nothing until the package's handler starts the sampler again. */
static SamplerObject *main_sampler;

/* pthread_atfork's child handler: runs in the child before fork() returns. */
static void child_forgets_callbacks(void) {
    main_sampler = NULL;
}

/* ---- The main thread's callback ---------------------------------------------------- */

/* Adds what recording did to the statistics (under lock). */
static void add_counts(SamplerObject *sp, const rec_counts *c) {
    sp->st.samples += c->samples;
    sp->st.ticks_coalesced += c->coalesced;
    sp->st.samples_failed += c->failed;
    sp->st.labels_refused += c->labels_refused;
    sp->st.task_samples += c->task_samples;
    sp->st.cpu_moved += c->cpu_moved;
    if (c->gap_ns > sp->st.tick_gap_ns_max) sp->st.tick_gap_ns_max = c->gap_ns;
    if (c->tick_ns) sp->st.last_tick_ns = c->tick_ns;
}

/* A callback longer than this is charged its CPU time (callback_charge). */
#define CHARGE_WALL_MAX_NS 200000

/* What the CPU budget charges the main thread's callback that ran from `start` to `end`
 * and gathered its own thread as gt (NULL if not), whose CPU clock it read at about
 * `clock_at`: its wall time (a bound of its CPU time, with no clock read), unless that
 * is longer than CHARGE_WALL_MAX_NS, a callback that the scheduler preempted or a CPU
 * quota throttled, which is charged its wall time to that reading and its CPU time
 * since. Charged its wall time, one callback preempted for 4 ms would delay the next
 * tick by 0.4 s at a 1% budget. */
static uint64_t callback_charge(int64_t start, int64_t clock_at, int64_t end,
                                const gthread *gt) {
    uint64_t wall = (uint64_t)(end - start);
    if (wall <= CHARGE_WALL_MAX_NS || !gt || gt->cpu_now < 0) return wall;
    int64_t cpu = thread_cpu_ns(gt->native_id);
    if (cpu < gt->cpu_now) return wall;
    uint64_t charge = (uint64_t)(clock_at - start) + (uint64_t)(cpu - gt->cpu_now);
    return charge < wall ? charge : wall;
}

/* Runs in the main thread, with the GIL, at a bytecode boundary (Py_AddPendingCall):
 * the main thread samples itself where it is. Never raises. */
static int main_callback(void *unused) {
    (void)unused;
    SamplerObject *sp = main_sampler;
    if (!sp) return 0;
    int expected = MAIN_REQUESTED;
    if (!atomic_compare_exchange_strong(&sp->main_state, &expected, MAIN_DONE)) {
        if (expected == MAIN_CANCELLED) atomic_store(&sp->main_state, MAIN_IDLE);
        return 0; /* the sampler's pass found it blocked and sampled it there */
    }
    pthread_mutex_lock(&sp->lock);
    uint64_t seq = sp->main_seq; /* the request this answers */
    RecorderObject *r = sp->recorder;
    int open = r->rec && !r->closing;
    /* The sampler, waiting for this answer, leaves the tasks to it (TASKS_ASKED). */
    int do_tasks = open && sp->cb_tasks == TASKS_ASKED;
    if (do_tasks) {
        sp->cb_tasks = TASKS_BUSY;
        /* The sampler records them without the GIL: Recorder.close() waits for that. */
        atomic_fetch_add(&r->busy, 1);
    }
    pthread_mutex_unlock(&sp->lock);
    if (!open) return 0; /* unanswered: the sampler's pass sees it */
    int64_t now = mono_ns();
    gbuf *b = &sp->cb;
    b->frames.n = b->uniq.n = b->labels.n = b->threads.n = 0;
    int gc = ppk_py_gc_pause();
    ppk_py_aio_refresh(sp);
    size_t n_tasks = ppk_py_running_tasks(sp, &sp->cb_running);
    const running_task *tasks = sp->cb_running.items;
    rec_counts c = {0};
    PyThreadState *t = PyThreadState_Get();
    threads_dict active = {0};
    int64_t clock_at = mono_ns(); /* (gather_thread reads this thread's CPU clock first) */
    int rc = ppk_py_gather_thread(sp, b, t, NULL, NULL, &active, tasks, n_tasks);
    ppk_py_gc_resume(gc);
    if (rc == 0 && b->threads.n && AT(b->threads, gthread, 0).n_frames) {
        gthread *gt = &AT(b->threads, gthread, 0);
        gt->main_mode = MAIN_RUNNING;
        int64_t cpu = ppk_py_main_deltas(sp, gt, now);
        ppk_py_record_thread(sp, sp->cb_builder, b, gt, cpu, &c);
        ppk_py_keep_sample(&sp->main_last, b, gt); /* for the last pass, if this stops */
        ppk_py_apply_fixups(sp, b); /* the GIL is held here */
    }
    if (do_tasks) {
        gc = ppk_py_gc_pause();
        /* The main thread's samples have counted its time up to main_wall_ns: this
         * callback's time if it sampled itself just now. */
        ppk_py_gather_tasks(sp, b, &active, tasks, n_tasks, sp->main_wall_ns);
        ppk_py_gc_resume(gc);
    }
    /* A program that runs alone gives the sampler no pass: the callback sweeps. */
    ppk_py_fcache_sweep(sp);
    /* The gathered strings were copied by the pushes: the references can go with the
     * sampler's next pass. */
    int others = 0;
    for (PyThreadState *o = PyInterpreterState_ThreadHead(sp->interp); o; o = PyThreadState_Next(o))
        others += o != t && o != sp->ts;
    int64_t end = mono_ns();
    uint64_t charge =
        callback_charge(now, clock_at, end, b->threads.n ? &AT(b->threads, gthread, 0) : NULL);
    pthread_mutex_lock(&sp->lock);
    sp->main_answered = seq;
    sp->main_others = rc ? -1 : others;
    sp->main_task = rc || !b->threads.n ? NULL : (void *)(uintptr_t)AT(b->threads, gthread, 0).task_id;
    if (do_tasks) sp->cb_tasks = TASKS_DONE;
    /* No asyncio task then (asyncio not imported, or its task set empty). */
    sp->main_no_tasks = !sp->tasks || !sp->aio.set || !PySet_GET_SIZE(sp->aio.set);
    if (sp->answer_awaited) pthread_cond_signal(&sp->wake); /* else it sleeps on */
    int passless = sp->passless;
    sp->st.main_callbacks++;
    sp->st.main_callback_ns_total += (uint64_t)(end - now);
    sp->st.main_callback_charged_ns_total += charge;
    add_counts(sp, &c);
    sp->st.refs_held = sp->refs.n + sp->old_refs.n;
    pthread_mutex_unlock(&sp->lock);
    /* Ticks without a pass leave the references of evicted frame cache entries to the
     * callback: nothing else needs them (with the GIL: a pass cannot begin meanwhile). */
    if (passless) ppk_py_release_refs(sp);
    return 0;
}

/* ---- The thread -------------------------------------------------------------------- */

static int finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* yield_gil lets the GIL go inside a pending call. CPython marks its pending calls as
 * being handled meanwhile (a flag, or the handling thread), and a child forked then by
 * the thread that took the GIL inherits the mark and never runs a pending call: its
 * main thread would never sample itself, nor hand the GIL over. So the package's
 * before-fork handler sets `forking` and waits until no yield_gil is in progress
 * (yields_active); yield_gil keeps the GIL while `forking` is set. */
static atomic_int forking, yields_active;

/* How long the main thread waits, without the GIL, for the sampler to take it: on 3.11,
 * where it also asks another holder to let the GIL go (below), long enough for a sampler
 * thread that a loaded machine schedules late; on 3.12 and later, where a holder other
 * than the main thread runs the pass itself (ask_holder), twice CPython's default switch
 * interval. */
#if PPK_PY_HOLDER_CALLS
#define HANDOFF_WAIT_NS 10000000
#else
#define HANDOFF_WAIT_NS 50000000
#endif
/* How often, on 3.11, the waiting main thread asks another holder to let the GIL go. */
#define HANDOFF_ASK_NS 1000000

/* Runs in the main thread, with the GIL (Py_AddPendingCall), while the sampler waits for
 * the GIL: hands it over. CPython asks a holder to drop the GIL only after a waiter has
 * waited a whole switch interval without any switch; an event loop that releases it for
 * a moment every few ms (polling between short task steps) takes it back each time
 * before the waiting sampler runs, and restarts that wait: the sampler could wait for
 * seconds, its ticks lost, and a task that ended meanwhile lose the time since its
 * last tick. Here the main thread lets the GIL go until the sampler holds it (or
 * HANDOFF_WAIT_NS passed, or a fork begins).
 *
 * The GIL let go goes to one of its waiters, which may be another thread than the
 * sampler (a thread computing beside the loop). That thread would keep it for a switch
 * interval (the sampler's own request), by then the main thread waits for the GIL again
 * too, and the three threads' race can leave the sampler waiting for seconds. So on
 * 3.11 the waiting main thread asks such a holder to let the GIL go at its next
 * bytecode boundary (ppk_py_ask_drop), every HANDOFF_ASK_NS: CPython's forced switch
 * then gives it to a waiter, and the main thread, waiting here, is none. Beside a busy
 * thread with a switch interval of 0.5 s, at most 1 of 115-174 handoffs fails (12-17%
 * without the asks) and the ticks keep their rate
 * (test_loop_beside_busy_thread_slow_switch). 3.12 and later do not ask (the same
 * failure costs the sampler a switch interval there). Never raises. */
static int yield_gil(void *unused) {
    (void)unused;
    SamplerObject *sp = main_sampler;
    if (!sp) return 0;
    atomic_store(&sp->yield_pending, 0);
    pthread_mutex_lock(&sp->lock);
    int wanted = sp->gil_wanted;
    pthread_mutex_unlock(&sp->lock);
    if (!wanted) return 0; /* the sampler had the GIL without it */
    /* Announced before `forking` is read, as the forking thread sets `forking` before
     * it reads this (ppk_py_samplers_before_fork): one of the two sees the other. */
    atomic_fetch_add(&yields_active, 1);
    if (atomic_load(&forking)) {
        atomic_fetch_sub(&yields_active, 1);
        return 0;
    }
    int64_t until = mono_ns() + HANDOFF_WAIT_NS;
    /* Without the GIL, another thread may stop the sampler and drop the last reference
     * to it: its lock and condition must outlive the wait. (Not running once stopped,
     * it is freed here then, with the GIL.) */
    Py_INCREF(sp);
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&sp->lock);
    while (sp->gil_wanted) {
        int64_t step = PPK_PY_HOLDER_CALLS ? until : mono_ns() + HANDOFF_ASK_NS;
        if (step > until) step = until;
        struct timespec ts = {step / 1000000000, step % 1000000000};
        if (pthread_cond_timedwait(&sp->handoff, &sp->lock, &ts) != ETIMEDOUT) continue;
        /* A fork waits for this to end (the forking thread holds the GIL). */
        if (step >= until || atomic_load(&forking)) break;
#if !PPK_PY_HOLDER_CALLS
        int locked;
        const PyThreadState *h = ppk_py_gil_last_holder(sp->interp, &locked);
        if (locked && h && h != sp->ts) ppk_py_ask_drop(sp->interp);
#endif
    }
    sp->st.handoffs++;
    sp->st.handoffs_failed += sp->gil_wanted != 0;
    pthread_mutex_unlock(&sp->lock);
    Py_END_ALLOW_THREADS
    atomic_fetch_sub(&yields_active, 1);
    Py_DECREF(sp);
    return 0;
}

/* Takes the GIL for a pass, asking the main thread to hand it over (yield_gil), and on
 * 3.11 another holder to let it go where it computes (ppk_py_ask_drop): it would
 * otherwise keep the GIL until it blocks, or for CPython's switch interval, and be
 * found where it blocks (runs_now, sampler_record.c, tells why that matters). */
static void take_gil(SamplerObject *sp) {
    PyThreadState *main_ts = atomic_load(&sp->main_ts);
#if !PPK_PY_HOLDER_CALLS
    int locked;
    const PyThreadState *holder = ppk_py_gil_last_holder(sp->interp, &locked);
    if (locked && holder && holder != main_ts) ppk_py_ask_drop(sp->interp);
#endif
    if (sp->main_ident && main_ts) {
        pthread_mutex_lock(&sp->lock);
        sp->gil_wanted = 1;
        pthread_mutex_unlock(&sp->lock);
        int expected = 0;
        if (atomic_compare_exchange_strong(&sp->yield_pending, &expected, 1)) {
            if (Py_AddPendingCall(yield_gil, NULL) == 0)
                ppk_py_wake_main(sp->interp, main_ts);
            else
                atomic_store(&sp->yield_pending, 0); /* the queue is full */
        } else {
            ppk_py_wake_main(sp->interp, main_ts); /* one is queued: it is this tick's */
        }
    }
    PyEval_RestoreThread(sp->ts);
    if (!sp->ts->thread_id) { /* its first take: the thread state is this thread's now */
        sp->ts->thread_id = PyThread_get_thread_ident();
        sp->ts->native_thread_id = PyThread_get_thread_native_id();
        ppk_py_note_thread_state(sp->ts);
    }
    pthread_mutex_lock(&sp->lock);
    sp->gil_wanted = 0;
    pthread_cond_broadcast(&sp->handoff);
    pthread_mutex_unlock(&sp->lock);
}

/* How long the sampler waits for the main thread's answer before it takes the GIL. */
#define ANSWER_WAIT_NS 1000000

/* Waits up to ANSWER_WAIT_NS for main_callback to answer this tick's request: 1 if it
 * did, saw no thread but itself and the sampler's, and read the asyncio tasks if they
 * are sampled (*tasks_read: it read them). */
static int wait_alone(SamplerObject *sp, int *tasks_read) {
    int64_t until = mono_ns() + ANSWER_WAIT_NS;
    struct timespec ts = {until / 1000000000, until % 1000000000};
    pthread_mutex_lock(&sp->lock);
    sp->answer_awaited = 1;
    sp->st.main_answers_awaited++;
    while (!sp->stop && sp->main_answered != sp->main_seq)
        if (pthread_cond_timedwait(&sp->wake, &sp->lock, &ts) == ETIMEDOUT) break;
    if (sp->cb_tasks == TASKS_ASKED) sp->cb_tasks = TASKS_NONE; /* too late: the pass will */
    while (sp->cb_tasks == TASKS_BUSY) pthread_cond_wait(&sp->wake, &sp->lock);
    sp->answer_awaited = 0;
    *tasks_read = sp->cb_tasks == TASKS_DONE;
    sp->cb_tasks = TASKS_NONE;
    int alone = sp->main_answered == sp->main_seq && sp->main_others == 0 &&
                (!sp->tasks || *tasks_read);
    pthread_mutex_unlock(&sp->lock);
    return alone;
}

/* Ends the hold on the recorder that main_callback took when it read the tasks, once
 * they are recorded (or the recorder was found closing). */
static void drop_cb_hold(SamplerObject *sp) {
    if (!sp->tasks_by_cb) return;
    sp->tasks_by_cb = 0;
    atomic_fetch_sub(&sp->recorder->busy, 1);
}

/* A tick whose only thread, the main one, sampled itself: no pass; the thread tables
 * become those of a pass that found no other thread. */
static void skip_pass(SamplerObject *sp) {
    int64_t now = mono_ns();
    sp->released_valid = 0;
    sp->tick.threads.n = 0;
    /* Ids the last pass learnt would be given to the frame cache at the next pass with
     * the previous buffer: after this tick's swap, later than the references that keep
     * their code objects' addresses from being reused. They are dropped (an id is
     * learnt again at its next use). */
    sp->tick.fixups.n = sp->prev.fixups.n = 0;
    rec_counts c = {0};
    ppk_py_record_all(sp, now, &c);
    drop_cb_hold(sp);
    pthread_mutex_lock(&sp->lock);
    add_counts(sp, &c);
    sp->passless = 1;
    sp->st.ticks++;
    sp->st.ticks_without_gil++;
    pthread_mutex_unlock(&sp->lock);
}

/* A tick due before the CPU budget allows it comes this fraction of the difference
 * later (charge_budget). */
#define BUDGET_SPREAD 4

/* Sleeps until the next deadline (a period apart on average, each drawn uniformly from
 * half to one and a half periods: a program that does something every period, a loop
 * with a 10 ms sleep, is then not always caught at the same point of it), later by a
 * BUDGET_SPREAD-th of the time until the CPU budget allows a tick, if that is later.
 * 1 when the sampler should stop instead. */
static int sleep_until_next(SamplerObject *sp, int64_t *deadline, uint64_t *rng) {
    *rng = *rng * 6364136223846793005u + 1442695040888963407u;
    uint64_t draw = *rng >> 33;
    *deadline += sp->period_ns / 2 + (int64_t)(draw % (uint64_t)sp->period_ns);
    pthread_mutex_lock(&sp->lock);
    if (*deadline < sp->budget_until) {
        int64_t later = *deadline + (sp->budget_until - *deadline) / BUDGET_SPREAD;
        sp->st.ticks_slowed++;
        sp->st.slowed_ns_total += (uint64_t)(later - *deadline);
        *deadline = later;
    }
    while (!sp->stop) {
        struct timespec ts = {*deadline / 1000000000, *deadline % 1000000000};
        if (pthread_cond_timedwait(&sp->wake, &sp->lock, &ts) == ETIMEDOUT) break;
    }
    int stop = sp->stop;
    pthread_mutex_unlock(&sp->lock);
    return stop || finalizing();
}

/* Asks the main thread to sample itself, unless the last request is still pending (it
 * has run no bytecode since: the pass samples it). 1 when its answer makes this tick's
 * pass needless (done: skip_pass). */
static int ask_main(SamplerObject *sp) {
    int st = atomic_load(&sp->main_state);
    sp->main_requested_now = 0;
    if ((st != MAIN_IDLE && st != MAIN_DONE) || !sp->main_ident) return 0;
    pthread_mutex_lock(&sp->lock);
    /* The previous request answered: the main thread was alone then. Its answer to
     * this one is not waited for if, besides, no asyncio task was there, nothing of
     * the tasks is left to record or release (no callback reads them now: the last one
     * answered), and it holds the GIL: it runs Python code, and answers within
     * microseconds where it runs. (Blocked, it would answer only when the blocking call
     * returns, on that call's stack, with the CPU time it used before: the wait and the
     * pass find it blocked instead, and carry that time to where it runs.) */
    int alone = sp->main_seq && sp->main_answered == sp->main_seq && sp->main_others == 0;
    int locked = 0;
    const PyThreadState *holder = alone ? ppk_py_gil_last_holder(sp->interp, &locked) : NULL;
    int unwaited = alone && locked && holder == atomic_load(&sp->main_ts) &&
                   sp->main_no_tasks && ppk_py_tasks_none(sp);
    sp->main_seq++;
    sp->cb_tasks = alone && !unwaited && sp->tasks ? TASKS_ASKED : TASKS_NONE;
    pthread_mutex_unlock(&sp->lock);
    atomic_store(&sp->main_state, MAIN_REQUESTED);
    if (Py_AddPendingCall(main_callback, NULL) != 0) {
        atomic_store(&sp->main_state, MAIN_IDLE); /* the queue is full */
        pthread_mutex_lock(&sp->lock);
        sp->cb_tasks = TASKS_NONE;
        pthread_mutex_unlock(&sp->lock);
        return 0;
    }
    sp->main_requested_now = 1;
    ppk_py_wake_main(sp->interp, atomic_load(&sp->main_ts));
    /* The main thread was the only one at its previous sample, and runs: the tick
     * needs no pass, and its answer comes while this thread sleeps (waiting for it
     * would cost a wake-up, ~25 us of CPU time here, a quarter of such a tick). A thread
     * that started since is sampled from the next tick on, its first sample counting
     * from this one (its time before is lost: at most a tick's). */
    if (unwaited) {
        skip_pass(sp);
        return 1;
    }
    /* Alone, with tasks or blocked: if it answers soon and still is, there is nothing
     * else to sample (it reads the tasks), and taking the GIL would only make it wait (a
     * forced switch, twice). */
    if (alone && wait_alone(sp, &sp->tasks_by_cb)) {
        skip_pass(sp);
        return 1;
    }
    return 0;
}

/* When a pass's steps began and ended (CLOCK_MONOTONIC). */
typedef struct pass_times {
    int64_t prepare, wait, hold, release, end;
} pass_times;

/* Adds a pass to the statistics. */
static void count_pass(SamplerObject *sp, const struct phase1 *p, const rec_counts *c,
                       const pass_times *t, int by_holder) {
    pthread_mutex_lock(&sp->lock);
    sp->st.ticks++;
    sp->st.main_blocked += (uint64_t)(p->ok && sp->main_blocked_now);
    sp->st.stacks_reused += p->ok ? sp->pass_reused : 0;
    sp->st.refs_held = p->held;
    sp->st.frame_cache_misses = p->misses;
    add_counts(sp, c);
    uint64_t wait = (uint64_t)(t->hold - t->wait), hold = (uint64_t)(t->release - t->hold);
    sp->st.gil_wait_ns_total += wait;
    if (wait > sp->st.gil_wait_ns_max) sp->st.gil_wait_ns_max = wait;
    sp->st.gil_hold_ns_total += hold;
    if (hold > sp->st.gil_hold_ns_max) sp->st.gil_hold_ns_max = hold;
    sp->st.holder_passes += (uint64_t)by_holder;
    sp->st.holder_ns_total += by_holder ? hold : 0;
    sp->st.tick_ns_total += (uint64_t)(t->end - t->hold);
    sp->st.prepare_ns_total += (uint64_t)(t->wait - t->prepare);
    pthread_mutex_unlock(&sp->lock);
}

/* Phase 1 and what goes with it while the GIL is held, in the sampler's thread or in the
 * GIL's holder (holder_callback). */
static void phase1(SamplerObject *sp, struct phase1 *p) {
    sp->pass_ident = PyThread_get_thread_ident();
    p->hold = mono_ns();
    sp->pre_fresh = p->hold - sp->phase0_ns <= CPU_FRESH_NS;
    RecorderObject *r = sp->recorder;
    p->open = r->rec && !r->closing;
    p->ok = p->open && ppk_py_gather(sp) == 0 &&
            ppk_py_slots_reserve(sp, sp->tick.threads.n) == 0;
    if (p->ok)
        atomic_fetch_add(&r->busy, 1);
    else if (p->open)
        ppk_py_forget_frames(sp);
    p->held = sp->refs.n + sp->old_refs.n;
    p->misses = sp->fcache_misses;
    /* The GIL changed holders during the pass (a finalizer run by a release lets it go):
     * the next phase 0 cannot know what ran then. */
    sp->released_valid = p->ok && ppk_py_gil_takes(sp->interp) == sp->gil_takes_released;
    p->release = mono_ns();
    sp->pass_ident = 0;
}

/* Runs, with the GIL, in whichever thread reaches a bytecode boundary first (CPython 3.12
 * and later: ppk_py_holder_call): phase 1 for the sampler, which waits for it
 * (ask_holder). Never raises. */
static int holder_callback(void *unused) {
    (void)unused;
    SamplerObject *sp = main_sampler;
    if (!sp) return 0;
    pthread_mutex_lock(&sp->lock);
    if (sp->holder_queued > 0) sp->holder_queued--; /* (a child's count starts at 0) */
    int go = sp->holder_state == HOLDER_ASKED;
    if (go) sp->holder_state = HOLDER_RUNNING;
    pthread_mutex_unlock(&sp->lock);
    if (!go) return 0; /* the sampler gave up waiting, or a call was queued twice */
    /* The pass runs in a thread of the program: what it clears or leaves of the error
     * indicator must not be that thread's (there is none at a bytecode boundary; kept
     * all the same). A finalizer run by the pass may drop the last reference to the
     * sampler: it goes only once the sampler thread no longer waits for this one. */
    Py_INCREF(sp);
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#endif
    struct phase1 p;
    phase1(sp, &p);
    PyErr_Clear();
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(exc);
#endif
    pthread_mutex_lock(&sp->lock);
    sp->holder_out = p;
    sp->holder_state = HOLDER_DONE;
    pthread_cond_signal(&sp->wake);
    pthread_mutex_unlock(&sp->lock);
    Py_DECREF(sp);
    return 0;
}

/* How long the sampler waits for the GIL's holder to begin phase 1 before it takes the
 * GIL itself (a holder in a long C call reaches no bytecode boundary). */
#define HOLDER_WAIT_NS 2000000
/* Calls queued and not run yet, at most (CPython's queue holds 32). */
#define HOLDER_QUEUED_MAX 4

/* Asks the thread that holds the GIL to run phase 1 (holder_callback): 1 if it did, with
 * what it did in *p. With several threads busy in Python code, a sampler that takes the
 * GIL waits among them (CPython wakes one waiter at a switch, in no order; 16 busy
 * threads kept it waiting 100-300 ms), and then takes the holder from its work twice
 * (CPython's switch to the sampler and back), where a holder that runs phase 1 itself
 * costs none. Not asked: the main thread (it hands the GIL over: yield_gil), a GIL that
 * nobody holds, a CPython without the queue (3.11). */
static int ask_holder(SamplerObject *sp, struct phase1 *p) {
    int locked;
    const PyThreadState *h = ppk_py_gil_last_holder(sp->interp, &locked);
    if (!PPK_PY_HOLDER_CALLS || !sp->main_ident || !locked || !h ||
        h == atomic_load(&sp->main_ts))
        return 0;
    pthread_mutex_lock(&sp->lock);
    int room = sp->holder_queued < HOLDER_QUEUED_MAX;
    if (room) {
        sp->holder_state = HOLDER_ASKED;
        sp->holder_queued++;
    }
    pthread_mutex_unlock(&sp->lock);
    if (!room) return 0;
    /* Not queued (the queue is full): a call queued at an earlier tick may still take
     * this request, and may have begun. */
    int queued = ppk_py_holder_call(sp->interp, holder_callback) == 0;
    int64_t until = mono_ns() + (queued ? HOLDER_WAIT_NS : 0);
    struct timespec ts = {until / 1000000000, until % 1000000000};
    pthread_mutex_lock(&sp->lock);
    if (!queued && sp->holder_queued > 0) sp->holder_queued--;
    while (sp->holder_state == HOLDER_ASKED && !sp->stop)
        if (pthread_cond_timedwait(&sp->wake, &sp->lock, &ts) == ETIMEDOUT) break;
    if (sp->holder_state == HOLDER_ASKED) sp->holder_state = HOLDER_IDLE; /* not begun */
    while (sp->holder_state == HOLDER_RUNNING) pthread_cond_wait(&sp->wake, &sp->lock);
    int done = sp->holder_state == HOLDER_DONE;
    if (done) *p = sp->holder_out;
    sp->holder_state = HOLDER_IDLE;
    pthread_mutex_unlock(&sp->lock);
    return done;
}

/* The pass: phases 0, 1 (with the GIL: the holder's, or taken) and 2. 0, or -1 when the
 * recorder was closed under the sampler (it stops). */
static int run_pass(SamplerObject *sp, pass_times *t, int by_holder_ok) {
    pthread_mutex_lock(&sp->lock);
    sp->passless = 0;
    pthread_mutex_unlock(&sp->lock);
    t->prepare = sp->phase0_ns = mono_ns();
    ppk_py_prepare(sp);
    t->wait = mono_ns();
    struct phase1 p;
    int by_holder = by_holder_ok && ask_holder(sp, &p);
    if (!by_holder) {
        take_gil(sp);
        phase1(sp, &p);
        PyEval_SaveThread();
    }
    t->hold = p.hold;
    t->release = p.release;
    if (!p.open) {
        drop_cb_hold(sp);
        return -1;
    }
    rec_counts c = {0};
    if (p.ok) {
        ppk_py_record_all(sp, t->hold, &c);
        atomic_fetch_sub(&sp->recorder->busy, 1);
    }
    drop_cb_hold(sp);
    t->end = mono_ns();
    count_pass(sp, &p, &c, t, by_holder);
    return 0;
}

/* The CPU time sampling has taken: the sampler thread's, and the passes that the main
 * thread (callback_charge) and the GIL's holder (its wall time: no clock of its own is
 * read with the GIL held) ran for it. */
static uint64_t sampling_cpu_ns(SamplerObject *sp) {
    struct timespec own;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own);
    pthread_mutex_lock(&sp->lock);
    uint64_t others = sp->st.main_callback_charged_ns_total + sp->st.holder_ns_total;
    pthread_mutex_unlock(&sp->lock);
    return (uint64_t)own.tv_sec * 1000000000 + (uint64_t)own.tv_nsec + others;
}

/* Periods of allowance a tick may use that earlier, cheaper ticks left: ticks whose
 * cost varies around less than the budget then rarely wait. */
#define BUDGET_CARRY 4
/* The budget delays a tick by at most about this, or two periods if longer: a pass
 * that a finalizer or the scheduler stretched is charged its wall time, and must not
 * stop sampling for long. */
#define BUDGET_WAIT_MAX_NS 1000000000

/* The CPU budget: the tick that began at `start` cost C (the sampling CPU time since the
 * previous tick's end, its wake-up included), which moves budget_until, from when the
 * sampling is within the budget, to max(budget_until, start - BUDGET_CARRY periods) +
 * C / budget, never past BUDGET_SPREAD x BUDGET_WAIT_MAX_NS (or two periods, if longer)
 * after `start` (what is owed past that is forgiven). A tick due before budget_until
 * comes a BUDGET_SPREAD-th of the difference later (sleep_until_next): a tick dearer
 * than its share (a process's first passes, a pass the scheduler preempted) slows the
 * next ticks, each a little, instead of leaving a gap of up to a second after it in
 * which threads ended and programs stopped unsampled; ticks that all cost C come
 * C / budget apart. Over any span of T the sampling then takes at most budget x (T +
 * BUDGET_CARRY periods + what it owes at the end of the span, budget_owed_ns) + the
 * tick in progress, unless a tick costs more than budget x BUDGET_WAIT_MAX_NS. */
static void charge_budget(SamplerObject *sp, int64_t start, uint64_t *spent) {
    if (!(sp->budget > 0)) return;
    uint64_t now = sampling_cpu_ns(sp);
    double cost = (double)(now - *spent);
    *spent = now;
    pthread_mutex_lock(&sp->lock);
    int64_t from = start - BUDGET_CARRY * sp->period_ns;
    if (sp->budget_until > from) from = sp->budget_until;
    int64_t wait_max = 2 * sp->period_ns > BUDGET_WAIT_MAX_NS ? 2 * sp->period_ns
                                                               : BUDGET_WAIT_MAX_NS;
    double until = (double)from + cost / sp->budget;
    double most = (double)start + BUDGET_SPREAD * (double)wait_max;
    sp->budget_until = until < most ? (int64_t)until : (int64_t)most;
    pthread_mutex_unlock(&sp->lock);
}

static void *sampler_main(void *arg) {
    SamplerObject *sp = arg;
    pthread_setname_np(pthread_self(), "ppk-sampler"); /* a name top -H, perf and gdb show */
    pthread_mutex_lock(&sp->lock);
    sp->own_tid = (unsigned long)PyThread_get_thread_native_id();
    pthread_mutex_unlock(&sp->lock);
    int64_t deadline = mono_ns();
    uint64_t rng = (uint64_t)deadline ^ (uint64_t)(uintptr_t)sp;
    uint64_t spent = sampling_cpu_ns(sp);
    int closed = 0;
    while (!sleep_until_next(sp, &deadline, &rng)) {
        int64_t start = mono_ns();
        if (!ask_main(sp)) {
            pass_times t;
            if ((closed = run_pass(sp, &t, 1))) break;
            if (t.end > deadline + sp->period_ns) {
                /* Late by more than a period (a long GIL wait): skip the missed ticks
                 * rather than sampling in a burst; the wall time covers the gap. */
                pthread_mutex_lock(&sp->lock);
                sp->st.ticks_late++;
                pthread_mutex_unlock(&sp->lock);
                deadline = t.end;
            }
        }
        charge_budget(sp, start, &spent);
    }
    pthread_mutex_lock(&sp->lock);
    int stopped = sp->stop;
    pthread_mutex_unlock(&sp->lock);
    if (!closed && stopped && !finalizing()) {
        /* A last pass: every thread's time from its last sample to the stop, which ticks
         * spaced out (a low rate, the CPU budget) would leave out; the thread that stops
         * the sampler on its last sample's stack (its stack is the stop's). Not by the
         * GIL's holder (which does not wait for a stopping sampler). */
        pass_times t;
        sp->final = 1;
        sp->main_requested_now = 0;
        run_pass(sp, &t, 0);
        sp->final = 0;
    }
    struct timespec own;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own);
    pthread_mutex_lock(&sp->lock);
    sp->st.cpu_ns = (uint64_t)own.tv_sec * 1000000000 + (uint64_t)own.tv_nsec;
    sp->own_tid = 0;
    sp->budget_until = 0; /* nothing is owed once sampling stopped */
    pthread_mutex_unlock(&sp->lock);
    return NULL;
}

/* ---- Start, stop, fork ------------------------------------------------------------- */

static int init_sync(SamplerObject *sp) {
    pthread_condattr_t ca;
    if (pthread_condattr_init(&ca)) return -1;
    int rc = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) ||
             pthread_mutex_init(&sp->lock, NULL);
    if (!rc && pthread_cond_init(&sp->wake, &ca)) {
        pthread_mutex_destroy(&sp->lock);
        rc = 1;
    }
    if (!rc && pthread_cond_init(&sp->handoff, &ca)) {
        pthread_cond_destroy(&sp->wake);
        pthread_mutex_destroy(&sp->lock);
        rc = 1;
    }
    sp->gil_wanted = 0;
    sp->holder_state = HOLDER_IDLE;
    sp->holder_queued = 0; /* (in a child, one may still be queued: it finds nothing) */
    atomic_store(&sp->yield_pending, 0); /* (in a child, one may still be queued: harmless) */
    pthread_condattr_destroy(&ca);
    return rc ? -1 : 0;
}

/* Releases what the passes kept and the buffers (with the GIL, the thread stopped). */
static void free_buffers(SamplerObject *sp) {
    ppk_py_release_refs(sp);
    if (sp->fcache) {
        for (size_t i = 0; i < FCACHE_SIZE; i++) Py_XDECREF(sp->fcache[i].code);
        free(sp->fcache);
        sp->fcache = NULL;
    }
    free(sp->fstamps);
    sp->fstamps = NULL;
    free(sp->fcounts);
    sp->fcounts = NULL;
    Py_CLEAR(sp->repairs);
    Py_CLEAR(sp->aio.current);
    Py_CLEAR(sp->aio.set);
    sp->aio.uses = 0;
    gbuf_free(&sp->tick);
    gbuf_free(&sp->prev);
    gbuf_free(&sp->cb);
    kept_free(&sp->main_last);
    kept_free(&sp->stopper_last);
    vec_free(&sp->remap);
    vec_free(&sp->running);
    vec_free(&sp->cb_running);
    ppk_py_free_tasks(sp);
    vec_free(&sp->refs);
    vec_free(&sp->old_refs);
    ppk_py_slots_release(sp->slots, sp->slot_cap);
    ppk_py_slots_release(sp->next_slots, sp->slot_cap);
    free(sp->slots);
    free(sp->next_slots);
    sp->slots = sp->next_slots = NULL;
    sp->slot_cap = 0;
}

/* Baselines for the threads there now: their first sample counts from here. */
static int baseline(SamplerObject *sp, int64_t now) {
    size_t n = 0;
    for (PyThreadState *t = PyInterpreterState_ThreadHead(sp->interp); t;
         t = PyThreadState_Next(t))
        n++;
    if (ppk_py_slots_reserve(sp, n + 1)) return -1;
    ppk_py_slots_release(sp->slots, sp->slot_cap);
    memset(sp->slots, 0, sp->slot_cap * sizeof *sp->slots);
    for (PyThreadState *t = PyInterpreterState_ThreadHead(sp->interp); t;
         t = PyThreadState_Next(t)) {
        if (!ppk_py_tstate_bound(t)) continue;
        unsigned long native = t->native_thread_id ? t->native_thread_id : 1;
        tslot *s = ppk_py_slot_find(sp->slots, sp->slot_cap, t->thread_id, native);
        *s = (tslot){.ident = t->thread_id,
                     .native_id = native,
                     .tid = t->native_thread_id,
                     .wall_ns = now,
                     .cpu_ns = thread_cpu_ns(t->native_thread_id),
                     .held_since = NOT_HELD};
        if (t->thread_id == sp->main_ident) {
            sp->main_wall_ns = now;
            sp->main_cpu_ns = s->cpu_ns;
            sp->main_cpu_carry = 0;
        }
    }
    sp->main_prev = (tslot){0};
    sp->main_last.valid = 0;
    sp->prev_tick_ns = now;
    return 0;
}

/* threading.main_thread().ident (called with the GIL, from Python code), or 0. */
static unsigned long main_thread_ident(void) {
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *main = threading ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
    PyObject *ident = main ? PyObject_GetAttrString(main, "ident") : NULL;
    unsigned long v = ident && PyLong_Check(ident) ? PyLong_AsUnsignedLong(ident) : 0;
    Py_XDECREF(ident);
    Py_XDECREF(main);
    Py_XDECREF(threading);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        v = 0;
    }
    return v;
}

/* Samplers started and not stopped (GIL-protected), for exit and fork. */
static SamplerObject *live;

static void live_add(SamplerObject *sp) {
    sp->prev_live = NULL;
    sp->next_live = live;
    if (live) live->prev_live = sp;
    live = sp;
}

static void live_remove(SamplerObject *sp) {
    if (sp->prev_live) sp->prev_live->next_live = sp->next_live;
    else if (live == sp) live = sp->next_live;
    if (sp->next_live) sp->next_live->prev_live = sp->prev_live;
    sp->next_live = sp->prev_live = NULL;
}

/* Sleeps 1 ms with the GIL released (waiting for another thread's start or stop). */
static void nap(void) {
    struct timespec ts = {0, 1000000};
    PyThreadState *save = PyEval_SaveThread();
    nanosleep(&ts, NULL);
    PyEval_RestoreThread(save);
}

/* Frees the builders and buffers start() set up (with the GIL, after Recorder.close
 * too; the thread is not running) and gives up sampling the main thread. */
static void release_builders(SamplerObject *sp) {
    if (main_sampler == sp) main_sampler = NULL;
    atomic_store(&sp->main_state, MAIN_IDLE);
    ppk_sample_free(sp->builder);
    ppk_sample_free(sp->cb_builder);
    sp->builder = sp->cb_builder = NULL;
    free_buffers(sp);
}

/* Frees what start() set up for the thread. During finalization the interpreter has
 * deleted the thread state itself. */
static void release_thread_state(SamplerObject *sp) {
    if (sp->ts && !finalizing()) {
        PyThreadState_Clear(sp->ts);
        ppk_py_unnote_thread_state(sp->ts);
        PyThreadState_Delete(sp->ts);
    }
    sp->ts = NULL;
    release_builders(sp);
}

/* Starts the thread. Another thread's start or stop of the same sampler in progress
 * (they release the GIL) is waited for; a second start does nothing. */
static int sampler_start(SamplerObject *sp) {
    while (sp->state == SAMPLER_STOPPING) nap();
    if (sp->state != SAMPLER_STOPPED) return 0;
    if (ppk_py_recorder_check_open(sp->recorder)) return -1;
    sp->state = SAMPLER_STARTING;
    /* First what may run Python code (and so let another thread in): the main
     * thread's ident. One sampler at a time samples the main thread from inside it;
     * another one started meanwhile samples it from its pass, like the other threads. */
    sp->main_ident = main_sampler ? 0 : main_thread_ident();
    atomic_store(&sp->main_state, MAIN_IDLE);
    sp->cb_tasks = TASKS_NONE;
    sp->tasks_by_cb = 0;
    sp->main_task = NULL;
    /* No answer of an earlier run (or of the parent, in a forked child) counts. */
    sp->main_seq = sp->main_answered = 0;
    sp->main_others = -1;
    sp->main_no_tasks = 0;
    sp->answer_awaited = 0;
    sp->holder_state = HOLDER_IDLE;
    sp->holder_queued = 0; /* one queued before a stop finds nothing to do */
    int rc = ppk_sample_create(sp->recorder->rec, &sp->builder);
    if (!rc) rc = ppk_sample_create(sp->recorder->rec, &sp->cb_builder);
    if (rc) {
        release_thread_state(sp);
        sp->state = SAMPLER_STOPPED;
        ppk_py_error(rc, "Sampler.start", NULL);
        return -1;
    }
    sp->interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    sp->fcache = calloc(FCACHE_SIZE, sizeof *sp->fcache);
    sp->fstamps = calloc(FCACHE_SIZE, sizeof *sp->fstamps);
    sp->fcounts = calloc(FCOUNT_SIZE, sizeof *sp->fcounts);
    sp->fsweep = 0;
    memset(sp->fheld, 0, sizeof sp->fheld);
    sp->fcache_misses = 0;
    sp->repairs = PyDict_New(); /* without it, no repairs (code_str) */
    PyErr_Clear();
    sp->ts = sp->fcache && sp->fstamps && sp->fcounts &&
                     (!sp->tasks_on || !ppk_py_tasks_init(sp))
                 ? PyThreadState_New(sp->interp)
                 : NULL;
    if (sp->ts) {
        /* PyThreadState_New gave it this thread's ident, and CPython finds a thread
         * state by ident (PyThreadState_SetAsyncExc takes the first one that has it:
         * this one, which is first in the list, so an exception meant for this thread
         * would be lost in it). No ident until the sampler thread takes it (take_gil);
         * the GIL held meanwhile, no one looks. */
        sp->ts->thread_id = 0;
        sp->ts->native_thread_id = 0;
    }
    int64_t now = mono_ns();
    if (!sp->ts || baseline(sp, now)) {
        release_thread_state(sp);
        sp->state = SAMPLER_STOPPED;
        PyErr_NoMemory();
        return -1;
    }
    sp->stop = 0;
    sp->budget_until = 0;
    sp->st.started_ns = (uint64_t)now;
    if (ppk_py_thread_create(&sp->thread, sampler_main, sp)) {
        release_thread_state(sp);
        sp->state = SAMPLER_STOPPED;
        ppk_py_error(PPK_ESYS, "Sampler.start", "pthread_create failed");
        return -1;
    }
    sp->state = SAMPLER_RUNNING;
    Py_INCREF(sp); /* the thread's, until stop() has joined it */
    live_add(sp);
    if (sp->main_ident && !main_sampler) main_sampler = sp;
    return 0;
}

/* Records what waiting tasks accumulated (with the GIL, the thread joined): the
 * recorder's last window holds it. */
static void flush_tasks(SamplerObject *sp) {
    RecorderObject *r = sp->recorder;
    if (!sp->tasks || !r->rec || r->closing || !sp->builder) return;
    rec_counts c = {0};
    ppk_py_flush_tasks(sp, &c);
    pthread_mutex_lock(&sp->lock);
    add_counts(sp, &c);
    pthread_mutex_unlock(&sp->lock);
}

/* Whether the caller runs inside the sampler's pass (a finalizer its release of
 * references ran). */
static int in_own_pass(const SamplerObject *sp) {
    return sp->pass_ident && sp->pass_ident == PyThread_get_thread_ident();
}

/* Stops and joins the thread (with the GIL released), then frees its state. A stop
 * or start in progress in another thread is waited for. -1 (an exception set) when
 * called from inside a pass (a finalizer its release of references ran): the thread
 * running the pass would wait for itself. */
static int sampler_stop(SamplerObject *sp) {
    if (in_own_pass(sp)) {
        PyErr_SetString(PyExc_RuntimeError,
                        "Sampler.stop() called by the sampler's own pass (a finalizer)");
        return -1;
    }
    while (sp->state == SAMPLER_STARTING) nap();
    if (sp->state == SAMPLER_STOPPING) {
        while (sp->state == SAMPLER_STOPPING) nap();
        return 0;
    }
    if (sp->state != SAMPLER_RUNNING) return 0;
    sp->state = SAMPLER_STOPPING;
    live_remove(sp);
    pthread_t thread = sp->thread;
    pthread_mutex_lock(&sp->lock);
    sp->stop = 1;
    sp->stopper = PyThread_get_thread_ident();
    pthread_cond_signal(&sp->wake);
    pthread_mutex_unlock(&sp->lock);
    PyThreadState *save = PyEval_SaveThread();
    pthread_join(thread, NULL);
    PyEval_RestoreThread(save);
    flush_tasks(sp);
    release_thread_state(sp);
    sp->state = SAMPLER_STOPPED;
    Py_DECREF(sp); /* the thread's */
    return 0;
}

/* In a forked child: the thread, and the thread state it had (CPython deleted it in
 * the child), are gone; what it held is this thread's to release, with the GIL. */
static void after_fork_child(SamplerObject *sp) {
    sp->restart_pending = sp->state == SAMPLER_RUNNING;
    sp->state = SAMPLER_STOPPED;
    sp->ts = NULL;
    init_sync(sp);
    memset(&sp->st, 0, sizeof sp->st); /* the child's figures are its own */
    sp->own_tid = 0;
    release_builders(sp);
    Py_DECREF(sp); /* the thread's (a restart takes another) */
}

void ppk_py_samplers_before_fork(void) {
    atomic_store(&forking, 1);
    while (atomic_load(&yields_active)) nap(); /* lets the main thread return */
}

void ppk_py_samplers_after_fork_parent(void) {
    atomic_store(&forking, 0);
}

void ppk_py_samplers_after_fork_child(void) {
    atomic_store(&forking, 0);
    atomic_store(&yields_active, 0); /* (a fork not made through os.fork may count one) */
    while (live) {
        SamplerObject *sp = live;
        live_remove(sp);
        after_fork_child(sp);
    }
}

void ppk_py_samplers_stop_all(void) {
    while (live)
        if (sampler_stop(live)) {
            PyErr_WriteUnraisable(NULL);
            break;
        }
}

/* ---- The Python type --------------------------------------------------------------- */

static int index_arg(PyObject *o, const char *what, size_t n_values, int *out) {
    if (!o || o == Py_None) {
        *out = -1;
        return 0;
    }
    int64_t v;
    if (ppk_py_i64(o, what, &v)) return -1;
    if (v < -1 || v >= (int64_t)n_values) {
        PyErr_Format(PyExc_ValueError, "%s must be -1 (not recorded) or a sample type "
                                       "index below %zu",
                     what, n_values);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static PyObject *Sampler_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"recorder",     "rate_hz",       "wall_index",
                             "cpu_index",    "count_index",   "tags_thread",
                             "tags_task",    "function_ids",  "asyncio_tasks",
                             "max_tasks_per_tick", "coalesce_ticks", "cpu_budget",
                             "task_hook",  NULL};
    PyObject *rec_obj, *wall = NULL, *cpu = NULL, *count = NULL, *tt = NULL, *tk = NULL;
    double rate = 100.0, budget = 0.0;
    int ids = 1, tasks = 0, hook = 1;
    long long max_tasks = 1000, coalesce = 10;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|$dOOOOOppLLdp", kwlist,
                                     &ppk_py_RecorderType, &rec_obj, &rate, &wall, &cpu, &count,
                                     &tt, &tk, &ids, &tasks, &max_tasks, &coalesce, &budget,
                                     &hook))
        return NULL;
    if (!(budget >= 0.0 && budget <= 100.0)) {
        PyErr_SetString(PyExc_ValueError, "cpu_budget must be between 0 (no limit) and 100");
        return NULL;
    }
    if (max_tasks < 1 || max_tasks > 10000000 || coalesce < 1 || coalesce > 1000000) {
        PyErr_SetString(PyExc_ValueError, "max_tasks_per_tick must be between 1 and 10000000 "
                                          "and coalesce_ticks between 1 and 1000000");
        return NULL;
    }
    RecorderObject *r = (RecorderObject *)rec_obj;
    if (ppk_py_recorder_check_open(r)) return NULL;
    if (!(rate >= 0.1 && rate <= 10000.0)) {
        PyErr_SetString(PyExc_ValueError, "rate_hz must be between 0.1 and 10000");
        return NULL;
    }
    if ((tt && tt != Py_None && !PyDict_Check(tt)) || (tk && tk != Py_None && !PyDict_Check(tk))) {
        PyErr_SetString(PyExc_TypeError, "tags_thread and tags_task must be dicts or None");
        return NULL;
    }
    int wi, ci, ki;
    if (index_arg(wall, "wall_index", r->n_values, &wi) ||
        index_arg(cpu, "cpu_index", r->n_values, &ci) ||
        index_arg(count, "count_index", r->n_values, &ki))
        return NULL;
    SamplerObject *sp = (SamplerObject *)type->tp_alloc(type, 0);
    if (!sp) return NULL;
    if (init_sync(sp)) {
        Py_TYPE(sp)->tp_free((PyObject *)sp);
        return ppk_py_error(PPK_ESYS, "Sampler", "pthread_mutex_init/pthread_cond_init");
    }
    sp->recorder = (RecorderObject *)Py_NewRef(r);
    sp->tags_thread = tt && tt != Py_None ? Py_NewRef(tt) : NULL;
    sp->tags_task = tk && tk != Py_None ? Py_NewRef(tk) : NULL;
    sp->period_ns = (int64_t)(1e9 / rate);
    sp->wall_idx = wi;
    sp->cpu_idx = ci;
    sp->count_idx = ki;
    sp->function_ids = ids;
    sp->tasks_on = tasks;
    sp->task_hook = hook;
    sp->max_tasks = (size_t)max_tasks;
    sp->coalesce = (uint64_t)coalesce;
    sp->budget = budget / 100.0;
    gbuf_init(&sp->tick);
    gbuf_init(&sp->prev);
    gbuf_init(&sp->cb);
    kept_init(&sp->main_last);
    kept_init(&sp->stopper_last);
    sp->remap = VEC(uint32_t);
    sp->running = sp->cb_running = VEC(running_task);
    sp->refs = VEC(PyObject *);
    sp->old_refs = VEC(PyObject *);
    return (PyObject *)sp;
}

static void Sampler_dealloc(SamplerObject *sp) {
    /* Not running: a running sampler holds a reference to itself. */
    free_buffers(sp);
    pthread_cond_destroy(&sp->wake);
    pthread_cond_destroy(&sp->handoff);
    pthread_mutex_destroy(&sp->lock);
    Py_XDECREF(sp->tags_thread);
    Py_XDECREF(sp->tags_task);
    Py_XDECREF(sp->recorder);
    Py_TYPE(sp)->tp_free((PyObject *)sp);
}

static PyObject *Sampler_start(SamplerObject *sp, PyObject *unused) {
    (void)unused;
    if (sampler_start(sp)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Sampler_stop(SamplerObject *sp, PyObject *unused) {
    (void)unused;
    if (sampler_stop(sp)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Sampler_in_own_pass(SamplerObject *sp, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(in_own_pass(sp));
}

static PyObject *Sampler_after_fork_child(SamplerObject *sp, PyObject *unused) {
    (void)unused;
    int restart = sp->restart_pending;
    sp->restart_pending = 0;
    if (restart && sp->recorder->rec && sampler_start(sp)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Sampler_stats(SamplerObject *sp, PyObject *unused) {
    (void)unused;
    pthread_mutex_lock(&sp->lock);
    sampler_stats st = sp->st;
    int64_t now = mono_ns();
    st.budget_owed_ns = sp->budget_until > now ? (uint64_t)(sp->budget_until - now) : 0;
    /* The thread is alive while own_tid is set: it clears it under the lock as it ends. */
    int64_t own = sp->own_tid ? thread_cpu_ns(sp->own_tid) : -1;
    if (own >= 0) st.cpu_ns = (uint64_t)own;
    pthread_mutex_unlock(&sp->lock);
    PyObject *d = PyDict_New();
#define PPK_PY_STAT_ITEM_(name)                                                            \
    if (d) {                                                                               \
        PyObject *x = PyLong_FromUnsignedLongLong(st.name);                                \
        if (!x || PyDict_SetItemString(d, #name, x)) Py_CLEAR(d);                          \
        Py_XDECREF(x);                                                                     \
    }
    PPK_PY_SAMPLER_STATS(PPK_PY_STAT_ITEM_)
#undef PPK_PY_STAT_ITEM_
    return d;
}

static PyObject *Sampler_get_running(SamplerObject *sp, void *closure) {
    (void)closure;
    return PyBool_FromLong(sp->state == SAMPLER_RUNNING);
}

static PyObject *Sampler_get_rate_hz(SamplerObject *sp, void *closure) {
    (void)closure;
    return PyFloat_FromDouble(1e9 / (double)sp->period_ns);
}

static PyGetSetDef Sampler_getset[] = {
    {"running", (getter)Sampler_get_running, NULL, "True between start() and stop()", NULL},
    {"rate_hz", (getter)Sampler_get_rate_hz, NULL, "ticks per second", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Sampler_methods[] = {
    {"start", (PyCFunction)Sampler_start, METH_NOARGS,
     "start(): starts the sampling thread (nothing if it runs)."},
    {"stop", (PyCFunction)Sampler_stop, METH_NOARGS,
     "stop(): stops and joins the sampling thread (the GIL is released meanwhile)."},
    {"stats", (PyCFunction)Sampler_stats, METH_NOARGS,
     "stats() -> dict: ticks, samples, failures, GIL wait and hold times (ns), the "
     "sampler thread's CPU time (ns)."},
    {"_in_own_pass", (PyCFunction)Sampler_in_own_pass, METH_NOARGS,
     "_in_own_pass() -> bool: whether the caller runs inside the sampler's pass (a "
     "finalizer it ran), where stop() cannot stop it."},
    {"_after_fork_child", (PyCFunction)Sampler_after_fork_child, METH_NOARGS,
     "In a forked child (after the package's fork handler forgot the parent's thread): "
     "start a new thread if it was running at the fork."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ppk_py_SamplerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pprofkit.Sampler",
    .tp_basicsize = sizeof(SamplerObject),
    .tp_dealloc = (destructor)Sampler_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sampler(recorder, *, rate_hz=100.0, wall_index=None, cpu_index=None, "
              "count_index=None, tags_thread=None, tags_task=None, function_ids=True, "
              "asyncio_tasks=False, max_tasks_per_tick=1000, coalesce_ticks=10, "
              "cpu_budget=0.0, task_hook=True)\n\n"
              "A native thread that samples every Python thread rate_hz times a second into "
              "the recorder: frames, thread and asyncio task labels, wall and CPU time "
              "(ns) and a count at the given sample type indices (None: not recorded). "
              "function_ids: frames are pushed by function id (the recorder's function "
              "dictionary), else by their strings. asyncio_tasks: also one sample per "
              "waiting asyncio task per tick (its coroutine chain, its name, wall time), "
              "visiting at most max_tasks_per_tick tasks a tick, and reading the chain "
              "of at most a 40th of that, 16 at least (the others at the next ticks), "
              "a task that has not moved recorded as one sample every coalesce_ticks "
              "periods. task_hook: while it samples tasks, BaseEventLoop.call_soon notes "
              "the tasks whose steps a loop schedules (and on 3.12+ create_task the "
              "task it made), so that a tick visits those only "
              "(and a 64th of max_tasks_per_tick others); restored at stop. cpu_budget: "
              "the percentage of one core that sampling may take (its "
              "thread, and the passes the main thread and the GIL's holder run for it); "
              "ticks come later when needed to keep within it (0: no limit).",
    .tp_methods = Sampler_methods,
    .tp_getset = Sampler_getset,
    .tp_new = Sampler_new,
};

int ppk_py_sampler_ready(void) {
    static int atfork_set; /* once a process, whatever the number of module inits */
    if (!atfork_set) {
        if (pthread_atfork(NULL, NULL, child_forgets_callbacks)) {
            PyErr_SetString(PyExc_OSError, "pprofkit: pthread_atfork failed");
            return -1;
        }
        atfork_set = 1;
    }
    return ppk_py_walk_ready() ? -1 : PyType_Ready(&ppk_py_SamplerType);
}
