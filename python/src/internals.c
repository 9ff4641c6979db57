/*
 * internals.c - the one file of the extension that reads CPython's internal structures
 * (compiled against the very interpreter's headers, as every file here is; what differs
 * between 3.11, 3.12 and 3.13 is here, under version tests).
 *
 * Frames: the sampler reads each thread's interpreter frames directly (below), because
 * the public way, PyThreadState_GetFrame and PyFrame_GetBack, makes a frame object for
 * every interpreter frame that has none: an allocation per frame of a thread that runs,
 * at every tick, with the GIL held.
 *
 * Waking the main thread: the sampler asks the main thread to sample itself with
 * Py_AddPendingCall. On 3.11 and 3.12 that call sets the interpreter's eval breaker
 * only when the calling thread is the main thread, which the sampler's is not; the main
 * thread then notices the request only when it next takes the GIL, after it blocked,
 * too late (sampler.c explains why that matters). ppk_py_wake_main sets the eval breaker
 * itself, and only while the main thread holds the GIL: the main thread then runs the
 * pending call at its next bytecode boundary and recomputes the eval breaker as it does
 * so. (Were the main thread to release the GIL in between, the thread that takes it
 * would find the breaker set with nothing to do for it, and check it until the next
 * forced switch recomputes it: a few ms of slower bytecode dispatch, rarely.) CPython
 * 3.13 wakes the main thread itself, except in a child forked from another thread
 * (below).
 */
#define Py_BUILD_CORE 1 /* for the internal headers below */
#include "binding.h"

#ifdef Py_GIL_DISABLED
#error "the sampler relies on the GIL: free-threaded CPython builds are not supported"
#endif

#include "internal/pycore_dict.h"
#include "internal/pycore_frame.h"
#include "internal/pycore_interp.h"
#include "internal/pycore_pystate.h"
#include "internal/pycore_runtime.h"
#if PY_VERSION_HEX >= 0x030C0000
#include "internal/pycore_ceval.h"
#endif

static struct _gil_runtime_state *gil_of(PyInterpreterState *interp) {
#if PY_VERSION_HEX >= 0x030C0000
    return interp->ceval.gil;
#else
    (void)interp;
    return &_PyRuntime.ceval.gil;
#endif
}

unsigned long ppk_py_gil_takes(PyInterpreterState *interp) {
    /* Written under the GIL's mutex at each change of holder; read here with or without
     * the GIL. */
    return __atomic_load_n(&gil_of(interp)->switch_number, __ATOMIC_RELAXED);
}

const PyThreadState *ppk_py_gil_last_holder(PyInterpreterState *interp, int *locked) {
    struct _gil_runtime_state *gil = gil_of(interp);
#if PY_VERSION_HEX >= 0x030D0000
    *locked = __atomic_load_n(&gil->locked, __ATOMIC_RELAXED);
    return __atomic_load_n(&gil->last_holder, __ATOMIC_RELAXED);
#else
    *locked = _Py_atomic_load_relaxed(&gil->locked);
    return (const PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder);
#endif
}

int ppk_py_tstate_bound(const PyThreadState *t) {
#if PY_VERSION_HEX >= 0x030C0000
    return t->_status.bound;
#else
    /* 3.11's _thread module makes a new thread's state in the thread that starts it,
     * with that thread's ident and native id; the new thread writes its own as it
     * begins, then notes the state as its own (gilstate_counter 0 -> 1). */
    return __atomic_load_n(&t->gilstate_counter, __ATOMIC_ACQUIRE) > 0;
#endif
}

void ppk_py_tstate_prefetch(const PyThreadState *t) {
    __builtin_prefetch(t);
    __builtin_prefetch(&t->thread_id);
#if PY_VERSION_HEX >= 0x030D0000
    __builtin_prefetch(&t->current_frame);
    __builtin_prefetch(&t->_status);
#elif PY_VERSION_HEX >= 0x030C0000
    __builtin_prefetch(&t->cframe);
    __builtin_prefetch(&t->_status);
#else
    __builtin_prefetch(&t->cframe);
    __builtin_prefetch(&t->gilstate_counter);
#endif
}

void ppk_py_note_thread_state(PyThreadState *ts) {
#if PY_VERSION_HEX >= 0x030C0000
    /* (3.12 and later note it as they activate it: PyEval_RestoreThread.) */
    Py_tss_t *key = &_PyRuntime.autoTSSkey;
#else
    Py_tss_t *key = &_PyRuntime.gilstate.autoTSSkey;
#endif
    if (PyThread_tss_is_created(key) && !PyThread_tss_get(key)) PyThread_tss_set(key, ts);
}

void ppk_py_unnote_thread_state(PyThreadState *ts) {
#if PY_VERSION_HEX >= 0x030C0000
    ts->_status.bound_gilstate = 0;
#else
    (void)ts; /* 3.11 clears only the deleting thread's own, if it is ts */
#endif
}

/* ---- A call that the GIL's holder runs -------------------------------------------- */
/* CPython 3.12 and later keep a queue of pending calls per interpreter that any thread
 * runs at its next bytecode boundary (the main thread's own queue is Py_AddPendingCall's);
 * _PyEval_AddPendingCall with no flags adds to it and tells the interpreter's threads
 * (3.12: the shared eval breaker; 3.13: the GIL's holder, or the next thread to take
 * it). 3.11 runs pending calls in the main thread only. */
#if PY_VERSION_HEX >= 0x030C0000
int ppk_py_holder_call(PyInterpreterState *interp, int (*fn)(void *)) {
    return _PyEval_AddPendingCall(interp, fn, NULL, 0) == 0 ? 0 : -1;
}
#else
int ppk_py_holder_call(PyInterpreterState *interp, int (*fn)(void *)) {
    (void)interp;
    (void)fn;
    return -1;
}
#endif

#if !PPK_PY_HOLDER_CALLS
void ppk_py_ask_drop(PyInterpreterState *interp) {
    /* What CPython's take_gil does once a waiter has waited a switch interval without a
     * switch: the holder lets the GIL go at its next bytecode boundary (and waits until
     * another thread took it); the thread that takes it clears the request. */
    _Py_atomic_store_relaxed(&interp->ceval.gil_drop_request, 1);
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
}
#endif

#if PY_VERSION_HEX < 0x030D0000

void ppk_py_wake_main(PyInterpreterState *interp, const PyThreadState *main_ts) {
    struct _gil_runtime_state *gil = gil_of(interp);
    if (!main_ts || !_Py_atomic_load_relaxed(&gil->locked) ||
        (const PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder) != main_ts)
        return;
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
}
#else
void ppk_py_wake_main(PyInterpreterState *interp, const PyThreadState *main_ts) {
    /* 3.13 signals the main thread's pending calls on _PyRuntime.main_tstate, which a
     * fork() from another thread leaves pointing at the parent's main thread state: in
     * such a child the main thread would never notice a request. Its own state is
     * signalled here then, while it holds the GIL (so it is alive). */
    int locked;
    if (!main_ts || main_ts == _PyRuntime.main_tstate ||
        ppk_py_gil_last_holder(interp, &locked) != main_ts || !locked)
        return;
    _Py_set_eval_breaker_bit((PyThreadState *)main_ts, _PY_CALLS_TO_DO_BIT);
}
#endif

/* ---- calls that check for signals ------------------------------------------------ */
/* CPython 3.12 and 3.13 keep an unnamed asyncio task's name as a number until
 * _asyncio.Task.get_name first formats it ("Task-%S": PyObject_Str), and PyObject_Str
 * calls PyErr_CheckSignals, which runs a collection scheduled then (3.12: the
 * interpreter's, 3.13: the calling thread's) there and then, and in the main thread the
 * Python handlers of the signals that came. With the GIL held for a pass, that is a
 * collection that frees the tasks the pass holds borrowed (garbage tasks in cycles wait
 * for one: the pass found them alive), and finalizers and handlers that run Python code,
 * which may let the GIL go. A scheduled collection is put off while get_name runs (the
 * flag cleared, then set again: it runs at the thread's next bytecode boundary, as it
 * would have); a signal pending where handlers run cannot be put off (its C handler may
 * set the flag again at any moment), so the name is not read then (3.11 names a task
 * when it is made). */
#if PY_VERSION_HEX >= 0x030C0000
int ppk_py_checks_begin(void) {
    PyThreadState *ts = PyThreadState_Get();
    if (_Py_ThreadCanHandleSignals(ts->interp) &&
#if PY_VERSION_HEX >= 0x030D0000
        __atomic_load_n(&_PyRuntime.signals.is_tripped, __ATOMIC_SEQ_CST)
#else
        _Py_atomic_load(&_PyRuntime.signals.is_tripped)
#endif
    )
        return -1;
#if PY_VERSION_HEX >= 0x030D0000
    if (!_Py_eval_breaker_bit_is_set(ts, _PY_GC_SCHEDULED_BIT)) return 0;
    _Py_unset_eval_breaker_bit(ts, _PY_GC_SCHEDULED_BIT);
#else
    if (!_Py_atomic_load_relaxed(&ts->interp->ceval.gc_scheduled)) return 0;
    _Py_atomic_store_relaxed(&ts->interp->ceval.gc_scheduled, 0);
#endif
    return 1;
}

void ppk_py_checks_end(int state) {
    if (state != 1) return;
    PyThreadState *ts = PyThreadState_Get();
#if PY_VERSION_HEX >= 0x030D0000
    _Py_set_eval_breaker_bit(ts, _PY_GC_SCHEDULED_BIT);
#else
    /* As _Py_ScheduleGC: with the eval breaker (get_name may have recomputed it). */
    _Py_atomic_store_relaxed(&ts->interp->ceval.gc_scheduled, 1);
    _Py_atomic_store_relaxed(&ts->interp->ceval.eval_breaker, 1);
#endif
}
#else
int ppk_py_checks_begin(void) { return 0; }

void ppk_py_checks_end(int state) { (void)state; }
#endif

/* ---- frames ------------------------------------------------------------------------ */
/* A thread's interpreter frames are a linked list from its current frame
 * (tstate->cframe->current_frame on 3.11 and 3.12, tstate->current_frame on 3.13)
 * through `previous`. Frames that are incomplete (on 3.12 and later the C-stack entry
 * frames, and a function still in its prologue) are left out, as PyThreadState_GetFrame
 * and PyFrame_GetBack leave them out: the walk skips the former; the latter is a matter
 * of the code's first traceable instruction, which the caller's frame cache knows
 * (ppk_py_frame_traceable). A frame's code is f_code (f_executable on 3.13, a code
 * object on every frame but the C-stack entry ones) and its instruction the one
 * _PyInterpreterFrame_LASTI gives. Reading them creates no frame object. */

/* The walk's next frame that may be complete: a C-stack entry frame (3.12 and later)
 * never is. Whether the others are depends on their code (ppk_py_frame_traceable), which
 * the walk leaves to the caller: its frame cache knows without reading the code. */
static _PyInterpreterFrame *maybe_complete(_PyInterpreterFrame *f) {
#if PY_VERSION_HEX >= 0x030C0000
    while (f && f->owner == FRAME_OWNED_BY_CSTACK) f = f->previous;
#endif
    return f;
}

int ppk_py_frame_traceable(PyCodeObject *code, int lasti) {
    /* _PyFrame_IsIncomplete's test, on the offset: an instruction before the first
     * traceable one is the function's prologue. */
    return lasti >= 0 && lasti / (int)sizeof(_Py_CODEUNIT) >= code->_co_firsttraceable;
}

void ppk_py_walk_begin(ppk_py_walk *w, PyThreadState *t) {
#if PY_VERSION_HEX >= 0x030D0000
    w->f = maybe_complete(t->current_frame);
#else
    w->f = t->cframe ? maybe_complete(t->cframe->current_frame) : NULL;
#endif
}

/* The code and instruction offset of interpreter frame f, as PyFrame_GetCode and
 * PyFrame_GetLasti give them. */
static void frame_ref(_PyInterpreterFrame *f, ppk_py_frame_ref *ref) {
#if PY_VERSION_HEX >= 0x030D0000
    ref->code = (PyCodeObject *)f->f_executable;
#else
    ref->code = f->f_code;
#endif
    int i = _PyInterpreterFrame_LASTI(f);
    ref->lasti = i < 0 ? -1 : i * (int)sizeof(_Py_CODEUNIT); /* as PyFrame_GetLasti */
}

int ppk_py_gen_frame(PyObject *gen, ppk_py_frame_ref *ref) {
    /* Generators and coroutines share _PyGenObject_HEAD: the frame is in the object
     * (gi_iframe). Their frame getters give None once it finished. */
    PyGenObject *g = (PyGenObject *)gen;
    if (g->gi_frame_state >= FRAME_COMPLETED) return 0;
    frame_ref((_PyInterpreterFrame *)g->gi_iframe, ref);
    ref->complete = 1;
    return 1;
}

/* An async generator's asend() awaitable (what `async for` awaits: __anext__) holds
 * its generator first, after the object's head, in 3.11 to 3.13 (Objects/genobject.c,
 * a private struct). */
typedef struct {
    PyObject_HEAD
    PyObject *ags_gen;
} asend_head;

PyObject *ppk_py_asend_gen(PyObject *o) {
    if (!Py_IS_TYPE(o, &_PyAsyncGenASend_Type)) return NULL;
    PyObject *g = ((asend_head *)o)->ags_gen;
    return g && PyAsyncGen_CheckExact(g) ? g : NULL;
}

/* One frame of a walk into *ref; the walk moves to the next. */
static void walk_step(ppk_py_walk *w, ppk_py_frame_ref *ref) {
    _PyInterpreterFrame *f = (_PyInterpreterFrame *)w->f;
    frame_ref(f, ref);
    ref->complete = f->owner == FRAME_OWNED_BY_GENERATOR;
    w->f = maybe_complete(f->previous);
}

size_t ppk_py_walk_read(ppk_py_walk *w, ppk_py_frame_ref *refs, size_t max) {
    size_t n = 0;
    for (; w->f && n < max; n++) walk_step(w, &refs[n]);
    return n;
}

long ppk_py_frame_count(PyThreadState *t) {
#if PY_VERSION_HEX >= 0x030C0000
    /* 3.12 and later count the thread's Python frames apart from C recursion: the eval
     * loop takes one from py_recursion_remaining for each frame it enters, a
     * generator's included, and gives it back when the frame leaves; the C-stack entry
     * frames are not counted. (3.11's recursion_remaining counts C calls too.) */
    return (long)t->py_recursion_limit - t->py_recursion_remaining;
#else
    (void)t;
    return -1;
#endif
}

size_t ppk_py_walk_count(ppk_py_walk *w) {
    size_t n = 0;
    for (; w->f; n++) w->f = maybe_complete(((_PyInterpreterFrame *)w->f)->previous);
    return n;
}

void ppk_py_walk_ahead(ppk_py_walk *ws, size_t n, ppk_py_frame_ref *refs, size_t depth,
                       size_t *counts) {
    /* A walk is a chain of loads, each waiting for the one before when the thread's
     * frames are not in this core's caches; the steps of different walks do not wait for
     * one another, so taking them in turn keeps as many loads in flight as there are
     * walks. */
    for (size_t i = 0; i < n; i++) counts[i] = 0;
    for (size_t d = 0, live = n; d < depth && live; d++) {
        live = 0;
        for (size_t i = 0; i < n; i++) {
            if (!ws[i].f) continue;
            walk_step(&ws[i], &refs[i * depth + d]);
            counts[i]++;
            live++;
        }
    }
}

/* ---- dicts ------------------------------------------------------------------------- */
/* A dict lookup compares keys of equal hash with ==, which for a key of a type of the
 * program's may run its __eq__: Python code. CPython's unicode key tables (combined or
 * split) hold exact str keys only, and are compared without it. */
int ppk_py_dict_str_keys(PyObject *d) {
    return ((PyDictObject *)d)->ma_keys->dk_kind != DICT_KEYS_GENERAL;
}
