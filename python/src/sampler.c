/*
 * sampler.c - pprofkit._native.Sampler: a native thread that samples every Python
 * thread of the interpreter at a fixed rate into a Recorder.
 *
 * The thread is a raw pthread (so that gevent's monkey-patching cannot make it a
 * greenlet) with a thread state of its own. It wakes on absolute CLOCK_MONOTONIC
 * deadlines; a tick has two phases:
 *
 *   1. With the GIL: walk every thread state's frames with the public C API
 *      (PyInterpreterState_ThreadHead, PyThreadState_Next, PyThreadState_GetFrame,
 *      PyFrame_GetBack, PyFrame_GetCode, PyFrame_GetLineNumber) and note, per frame, the
 *      UTF-8 of the code's co_qualname and co_filename (PyUnicode_AsUTF8AndSize, cached
 *      in the str) and the line, holding a reference to each code object; per thread,
 *      its ident, native id, name, the asyncio task it is running and the labels of
 *      pprofkit.tag(). Nothing here runs Python code (which could let the GIL go
 *      mid-walk): attributes are read only through types whose attribute lookup is
 *      the generic one and that define no descriptor of that name (safe_getattr), and
 *      the only call is _asyncio.Task.get_name, a C function.
 *   2. Without the GIL: per thread, CPU time from the thread's CPU clock, then one
 *      sample pushed into the recorder (the library copies the strings), and flushed.
 *      The references taken in phase 1 keep every string alive; they are released at
 *      the start of the next phase 1 (or at stop), with the GIL.
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
 * CPython 3.11 and 3.12, internals.c makes the main thread notice the request.) During phase 2 the recorder counts the sampler as busy, so
 * Recorder.close() waits for it; a closed recorder stops the sampling.
 *
 * Values: wall time is the time since the thread's previous sample (so a tick that the
 * GIL delayed weighs what it covered; a thread seen for the first time gets the time
 * since the previous tick, when it was not there yet), CPU time the growth of the
 * thread's CPU clock, count 1.
 *
 * Version-specific details live in one place each: the thread state's thread_id and
 * native_thread_id fields and the code object's co_qualname / co_filename /
 * co_firstlineno (the same in 3.11, 3.12 and 3.13), and asyncio's internals, which are
 * read only through names all three versions have: asyncio.tasks._current_tasks (the
 * task each running loop is stepping) and a loop's _thread_id (the thread running it).
 *
 * Fork: the thread does not exist in a child. _after_fork_child() (called by the
 * package's os.register_at_fork handler) forgets it and starts a new one if it ran.
 */
#include "binding.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Per-tick data ----------------------------------------------------------------- */

typedef struct gframe {
    ppk_str name, file;
    int64_t start_line, line;
} gframe;

typedef struct glabel {
    ppk_str key, str;
    int is_num;
    int64_t num;
} glabel;

typedef struct gthread {
    unsigned long ident;
    unsigned long native_id;
    ppk_str name;      /* empty: unknown */
    ppk_str task_name; /* empty: no task, or no name */
    int64_t task_id;   /* 0: no task */
    size_t first_frame, n_frames;
    size_t first_label, n_labels;
    int64_t wall_ns;
    int main_mode; /* the main thread: MAIN_RUNNING, MAIN_BLOCKING or MAIN_BLOCKED */
} gthread;

/* The frame cache: what a frame shows (its code's names and the line) by code object
 * and instruction offset, so that a frame seen at an earlier tick costs a lookup
 * instead of a line-table walk. Direct-mapped, FCACHE_SIZE entries; an entry holds a
 * reference to its code object (so the address cannot be reused by another code while
 * it is cached); an evicted code is released at the next tick, since strings of the
 * tick being gathered may point into it. */
#define FCACHE_SIZE 4096

typedef struct fentry {
    PyCodeObject *code; /* NULL: empty */
    int lasti;
    gframe frame;
} fentry;

/* What a thread had at its previous sample, for the deltas. */
typedef struct tslot {
    unsigned long ident, native_id; /* native_id 0: empty slot */
    int64_t wall_ns;                /* CLOCK_MONOTONIC at the previous sample */
    int64_t cpu_ns;                 /* its CPU clock then */
} tslot;

/* A growable array of `size`-byte items (malloc: phase 2 runs without the GIL). */
typedef struct vec {
    void *items;
    size_t n, cap, size;
} vec;

static void *vec_push(vec *v) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        void *p = realloc(v->items, cap * v->size);
        if (!p) return NULL;
        v->items = p;
        v->cap = cap;
    }
    return (char *)v->items + v->size * v->n++;
}

static void vec_free(vec *v) {
    free(v->items);
    v->items = NULL;
    v->n = v->cap = 0;
}

#define VEC(T) ((vec){NULL, 0, 0, sizeof(T)})
#define AT(v, T, i) (((T *)(v).items)[i])

/* What one pass gathered: threads, their frames and labels. */
typedef struct gbuf {
    vec frames, labels, threads;
} gbuf;

static void gbuf_init(gbuf *b) {
    b->frames = VEC(gframe);
    b->labels = VEC(glabel);
    b->threads = VEC(gthread);
}

static void gbuf_free(gbuf *b) {
    vec_free(&b->frames);
    vec_free(&b->labels);
    vec_free(&b->threads);
}

/* ---- The object -------------------------------------------------------------------- */

typedef struct SamplerObject {
    PyObject_HEAD
    RecorderObject *recorder;
    PyObject *tags_thread; /* dict: thread ident -> ((key, value), ...), or NULL */
    PyObject *tags_task;   /* dict: id(task) -> ((key, value), ...), or NULL */
    int64_t period_ns;
    int wall_idx, cpu_idx, count_idx; /* -1: not recorded */

    PyInterpreterState *interp;
    pthread_t thread;
    int running; /* a thread was started and not joined (GIL-protected) */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* CLOCK_MONOTONIC */
    int stop;            /* under lock */

    /* The sampler thread's own state (its thread only, or under the GIL while it is
     * stopped). */
    PyThreadState *ts;
    ppk_sample *builder;
    gbuf tick;
    tslot *slots, *next_slots; /* every thread but the main one; power-of-two capacity */
    size_t slot_cap;
    int64_t prev_tick_ns; /* CLOCK_MONOTONIC of the previous phase 1 */

    /* Under the GIL (phase 1 and main_callback): the frame cache, and the references
     * that keep what the gathered frames point to alive until the next phase 1. */
    fentry *fcache; /* FCACHE_SIZE entries, allocated at start */
    vec refs;

    /* The main thread: sampled by main_callback (in the main thread, with the GIL) or
     * by the sampler's pass, never both in one tick (main_state says which). */
    unsigned long main_ident;
    _Atomic(PyThreadState *) main_ts; /* its thread state, as last seen (only compared) */
    atomic_int main_state;  /* MAIN_IDLE, MAIN_REQUESTED, MAIN_DONE, MAIN_CANCELLED */
    ppk_sample *cb_builder; /* main_callback's own: it may run during phase 2 */
    gbuf cb;
    int64_t main_wall_ns, main_cpu_ns; /* at the main thread's previous sample */
    int64_t main_cpu_carry;            /* CPU time not charged yet (main_deltas) */
    int main_request_failed;           /* Py_AddPendingCall refused this tick's request */
    /* Statistics (read under lock). */
    uint64_t ticks, samples, samples_failed, labels_refused, ticks_late;
    uint64_t main_callbacks, main_callback_ns_total, main_blocked;
    uint64_t gil_wait_ns_total, gil_wait_ns_max, gil_hold_ns_total, gil_hold_ns_max;
    uint64_t tick_ns_total; /* phase 1 + phase 2 */
    int64_t cpu_ns;         /* the sampler thread's own CPU time */
} SamplerObject;

enum { MAIN_IDLE, MAIN_REQUESTED, MAIN_DONE, MAIN_CANCELLED };

/* How the main thread was found: running Python code (it sampled itself), blocked
 * since this tick (it ran Python code since its previous sample), or blocked since the
 * previous tick at least (it ran no Python code since). */
enum { MAIN_RUNNING = 1, MAIN_BLOCKING, MAIN_BLOCKED };

/* The sampler whose main_callback runs (GIL-protected): a pending call cannot be taken
 * back, so the callback finds its sampler here, and nothing once it stopped. */
static struct SamplerObject *main_sampler;

/* Interned attribute names and _asyncio.Task.get_name, set up once. */
static PyObject *str_name, *str_thread_id, *str_get_name, *str_active, *str_current_tasks,
    *str_Task, *task_get_name;

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A thread's CPU time from its kernel thread id: the Linux encoding of a per-thread
 * CPU-time clock (what pthread_getcpuclockid computes from the pthread_t). The tid is
 * used instead of the pthread_t because a tid of a thread that has exited only makes
 * clock_gettime fail, while a stale pthread_t would be dereferenced. -1: no clock. */
static int64_t thread_cpu_ns(unsigned long tid) {
    if (!tid) return -1;
    clockid_t cid = (clockid_t)((~(unsigned)tid << 3) | 6u);
    struct timespec ts;
    if (clock_gettime(cid, &ts)) return -1;
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- Phase 1: reading the interpreter, with the GIL -------------------------------- */

/* obj.name when it can be read without running Python code: the type's attribute
 * lookup is the generic one and the type has no descriptor of that name (a plain class
 * attribute is fine). A new reference, or NULL (no error set). The type's attributes are
 * looked up with _PyType_Lookup (3.11 to 3.13: the MRO walk behind the type cache, which
 * raises nothing, so a missing attribute costs no exception object). */
static PyObject *safe_getattr(PyObject *obj, PyObject *name) {
    if (Py_TYPE(obj)->tp_getattro != PyObject_GenericGetAttr) return NULL;
    PyObject *cls_attr = _PyType_Lookup(Py_TYPE(obj), name);
    if (cls_attr && Py_TYPE(cls_attr)->tp_descr_get) return NULL;
    PyObject *v = PyObject_GetAttr(obj, name);
    if (!v) PyErr_Clear();
    return v;
}

/* sys.modules[mod].attr if that module is imported (borrowed), else NULL. */
static PyObject *module_attr(const char *mod, PyObject *attr) {
    PyObject *modules = PyImport_GetModuleDict();
    PyObject *m = modules && PyDict_Check(modules) ? PyDict_GetItemString(modules, mod) : NULL;
    if (!m || !PyModule_Check(m)) return NULL;
    PyObject *d = PyModule_GetDict(m);
    return d ? PyDict_GetItem(d, attr) : NULL;
}

/* Keeps a reference until the next phase 1. -1 on allocation failure (o released). */
static int keep_ref(SamplerObject *sp, PyObject *o) {
    PyObject **slot = vec_push(&sp->refs);
    if (!slot) {
        Py_DECREF(o);
        return -1;
    }
    *slot = o;
    return 0;
}

/* The UTF-8 of a str whose reference is kept; empty if it is not a str or has no
 * UTF-8 form (lone surrogates). */
static ppk_str utf8_of(PyObject *s) {
    Py_ssize_t n;
    const char *p = PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    if (!p) {
        PyErr_Clear();
        return (ppk_str){NULL, 0};
    }
    return (ppk_str){p, (size_t)n};
}

/* A running task's name, read without running Python code (NULL if unknown). */
static PyObject *task_name(PyObject *task) {
    if (task_get_name) {
        if (_PyType_Lookup(Py_TYPE(task), str_get_name) == task_get_name) {
            PyObject *name = PyObject_CallOneArg(task_get_name, task);
            if (!name) PyErr_Clear();
            return name;
        }
    }
    return safe_getattr(task, str_name); /* the pure-Python Task keeps it in _name */
}

/* The labels of pprofkit.tag() for `key` in dict `tags`: a tuple of (key, value) pairs,
 * each value a str or an int. */
static void gather_tags(SamplerObject *sp, gbuf *b, PyObject *tags, PyObject *key,
                        gthread *gt) {
    if (!tags || !key) return;
    PyObject *t = PyDict_GetItemWithError(tags, key);
    if (!t) {
        PyErr_Clear();
        return;
    }
    if (!PyTuple_Check(t)) return;
    Py_INCREF(t);
    if (keep_ref(sp, t)) return;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        PyObject *pair = PyTuple_GET_ITEM(t, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) continue;
        PyObject *k = PyTuple_GET_ITEM(pair, 0), *v = PyTuple_GET_ITEM(pair, 1);
        glabel l = {utf8_of(k), {NULL, 0}, 0, 0};
        if (!l.key.len) continue;
        if (PyLong_Check(v)) {
            int overflow;
            l.num = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (overflow || (l.num == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                continue;
            }
            l.is_num = 1;
        } else if (PyUnicode_Check(v)) {
            l.str = utf8_of(v);
        } else {
            continue;
        }
        glabel *slot = vec_push(&b->labels);
        if (!slot) return;
        *slot = l;
        gt->n_labels++;
    }
}

/* The loops running a task now: pairs (thread ident, task), at most `max`. */
typedef struct running_task {
    unsigned long ident;
    PyObject *task; /* borrowed from _current_tasks, which phase 1 does not change */
} running_task;

static size_t running_tasks(running_task *out, size_t max) {
    PyObject *current = module_attr("asyncio.tasks", str_current_tasks);
    if (!current || !PyDict_Check(current)) return 0;
    if (!task_get_name) {
        /* asyncio is imported: its C Task type's get_name, looked up once. */
        PyObject *task_type = module_attr("_asyncio", str_Task);
        if (task_type && PyType_Check(task_type)) {
            task_get_name = PyObject_GetAttr(task_type, str_get_name);
            if (!task_get_name) PyErr_Clear();
        }
    }
    size_t n = 0;
    Py_ssize_t pos = 0;
    PyObject *loop, *task;
    while (n < max && PyDict_Next(current, &pos, &loop, &task)) {
        PyObject *tid = safe_getattr(loop, str_thread_id);
        if (tid && PyLong_Check(tid)) {
            unsigned long ident = PyLong_AsUnsignedLong(tid);
            if (!PyErr_Occurred()) out[n++] = (running_task){ident, task};
        }
        PyErr_Clear();
        Py_XDECREF(tid);
    }
    return n;
}

#define MAX_LOOPS 64

/* What frame f shows, from the cache or computed (and cached). -1: no memory. */
static int frame_of(SamplerObject *sp, PyFrameObject *f, gframe *out) {
    PyCodeObject *code = PyFrame_GetCode(f);
    int lasti = PyFrame_GetLasti(f);
    uint64_t h = ((uint64_t)(uintptr_t)code >> 4) * 0x9E3779B97F4A7C15u ^ (uint64_t)lasti;
    fentry *e = &sp->fcache[(h * 0xBF58476D1CE4E5B9u >> 40) % FCACHE_SIZE];
    if (e->code == code && e->lasti == lasti) {
        Py_DECREF(code);
        *out = e->frame;
        return 0;
    }
    if (e->code && keep_ref(sp, (PyObject *)e->code)) {
        Py_DECREF(code);
        return -1;
    }
    int line = PyFrame_GetLineNumber(f);
    e->code = code; /* the entry takes the reference */
    e->lasti = lasti;
    e->frame = (gframe){utf8_of(code->co_qualname), utf8_of(code->co_filename),
                        code->co_firstlineno, line > 0 ? line : 0};
    *out = e->frame;
    return 0;
}

/* Gathers thread t into b. -1: no memory. */
static int gather_thread(SamplerObject *sp, gbuf *b, PyThreadState *t, PyObject *active,
                         const running_task *tasks, size_t n_tasks) {
    PyFrameObject *f = PyThreadState_GetFrame(t);
    if (!f) return 0; /* no Python code running: nothing to show */
    gthread *gt = vec_push(&b->threads);
    if (!gt) {
        Py_DECREF(f);
        return -1;
    }
    memset(gt, 0, sizeof *gt);
    gt->ident = t->thread_id;
    gt->native_id = t->native_thread_id;
    gt->first_frame = b->frames.n;
    gt->first_label = b->labels.n;
    while (f) {
        gframe *gf = vec_push(&b->frames);
        if (!gf || frame_of(sp, f, gf)) {
            Py_DECREF(f);
            return -1;
        }
        gt->n_frames++;
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
    }

    PyObject *ident = PyLong_FromUnsignedLong(gt->ident);
    if (!ident) PyErr_Clear();
    PyObject *thread = active && ident ? PyDict_GetItemWithError(active, ident) : NULL;
    if (!thread) PyErr_Clear();
    PyObject *name = thread ? safe_getattr(thread, str_name) : NULL;
    if (name && !keep_ref(sp, name)) gt->name = utf8_of(name);
    gather_tags(sp, b, sp->tags_thread, ident, gt);
    Py_XDECREF(ident);

    for (size_t i = 0; i < n_tasks; i++) {
        if (tasks[i].ident != gt->ident) continue;
        PyObject *task = tasks[i].task;
        gt->task_id = (int64_t)(uintptr_t)task;
        PyObject *tname = task_name(task);
        if (tname && !keep_ref(sp, tname)) gt->task_name = utf8_of(tname);
        PyObject *tid = PyLong_FromVoidPtr(task);
        if (!tid) PyErr_Clear();
        gather_tags(sp, b, sp->tags_task, tid, gt);
        Py_XDECREF(tid);
        break;
    }
    return 0;
}

static PyObject *threads_by_ident(void) {
    PyObject *active = module_attr("threading", str_active);
    return active && PyDict_Check(active) ? active : NULL;
}

static void release_refs(SamplerObject *sp) {
    for (size_t i = 0; i < sp->refs.n; i++) Py_DECREF(AT(sp->refs, PyObject *, i));
    sp->refs.n = 0;
}

/* Phase 1: every thread but the sampler's, and the main thread only when it is blocked
 * (its callback has not run since it was asked for). -1: no memory (tick skipped). */
static int gather(SamplerObject *sp) {
    release_refs(sp);
    sp->tick.frames.n = sp->tick.labels.n = sp->tick.threads.n = 0;
    PyObject *active = threads_by_ident();
    running_task tasks[MAX_LOOPS];
    size_t n_tasks = running_tasks(tasks, MAX_LOOPS);
    for (PyThreadState *t = PyInterpreterState_ThreadHead(sp->interp); t;
         t = PyThreadState_Next(t)) {
        if (t == sp->ts) continue;
        int mode = 0;
        if (t->thread_id == sp->main_ident) {
            atomic_store(&sp->main_ts, t);
            int st = MAIN_REQUESTED;
            if (atomic_compare_exchange_strong(&sp->main_state, &st, MAIN_CANCELLED))
                mode = MAIN_BLOCKING; /* it ran no Python code since the request */
            else if (st == MAIN_CANCELLED)
                mode = MAIN_BLOCKED; /* nor since the previous tick's */
            else if (sp->main_request_failed)
                mode = MAIN_BLOCKING;
            else
                continue; /* it sampled itself */
            sp->main_blocked++;
        }
        size_t n = sp->tick.threads.n;
        if (gather_thread(sp, &sp->tick, t, active, tasks, n_tasks)) return -1;
        if (sp->tick.threads.n > n) AT(sp->tick.threads, gthread, n).main_mode = mode;
    }
    return 0;
}

/* ---- Thread slots: the previous sample of each thread ------------------------------ */

static size_t slot_hash(unsigned long ident, unsigned long native_id, size_t mask) {
    uint64_t h = (uint64_t)ident * 0x9E3779B97F4A7C15u ^ (uint64_t)native_id;
    h ^= h >> 29;
    return (size_t)(h * 0xBF58476D1CE4E5B9u >> 17) & mask;
}

static tslot *slot_find(tslot *slots, size_t cap, unsigned long ident, unsigned long native) {
    size_t mask = cap - 1;
    for (size_t i = slot_hash(ident, native, mask);; i = (i + 1) & mask) {
        tslot *s = &slots[i];
        if (!s->native_id || (s->ident == ident && s->native_id == native)) return s;
    }
}

/* Makes room for `n` threads in both tables (at most half full). -1: no memory. */
static int slots_reserve(SamplerObject *sp, size_t n) {
    if (n * 2 <= sp->slot_cap) return 0;
    size_t cap = sp->slot_cap ? sp->slot_cap : 64;
    while (cap < n * 2) cap *= 2;
    tslot *a = calloc(cap, sizeof *a), *b = calloc(cap, sizeof *b);
    if (!a || !b) {
        free(a);
        free(b);
        return -1;
    }
    for (size_t i = 0; i < sp->slot_cap; i++) {
        tslot *s = &sp->slots[i];
        if (s->native_id) *slot_find(a, cap, s->ident, s->native_id) = *s;
    }
    free(sp->slots);
    free(sp->next_slots);
    sp->slots = a;
    sp->next_slots = b;
    sp->slot_cap = cap;
    return 0;
}

/* ---- Phase 2: recording, without the GIL ------------------------------------------- */

static const ppk_str L_THREAD_ID = PPK_STR("thread id"), L_NATIVE = PPK_STR("thread native id"),
                     L_THREAD_NAME = PPK_STR("thread name"), L_TASK_NAME = PPK_STR("task name"),
                     L_TASK_ID = PPK_STR("task id");

/* What record_thread did, added to the statistics by its caller. */
typedef struct rec_counts {
    uint64_t samples, failed, labels_refused;
} rec_counts;

static void record_thread(SamplerObject *sp, ppk_sample *s, const gbuf *b, const gthread *gt,
                          int64_t cpu, rec_counts *c) {
    if (ppk_sample_start(s)) { /* the recorder is gone */
        c->failed++;
        return;
    }
    for (size_t i = 0; i < gt->n_frames; i++) {
        const gframe *g = &AT(b->frames, gframe, gt->first_frame + i);
        ppk_frame f = {.name = g->name, .filename = g->file, .start_line = g->start_line,
                       .line = g->line};
        ppk_sample_push_frame_ex(s, &f);
    }
    int refused = 0;
    refused |= ppk_sample_push_label_num(s, L_THREAD_ID, (int64_t)gt->ident, (ppk_str){0});
    refused |= ppk_sample_push_label_num(s, L_NATIVE, (int64_t)gt->native_id, (ppk_str){0});
    if (gt->name.len) refused |= ppk_sample_push_label_str(s, L_THREAD_NAME, gt->name);
    if (gt->task_id) {
        if (gt->task_name.len)
            refused |= ppk_sample_push_label_str(s, L_TASK_NAME, gt->task_name);
        refused |= ppk_sample_push_label_num(s, L_TASK_ID, gt->task_id, (ppk_str){0});
    }
    for (size_t i = 0; i < gt->n_labels; i++) {
        const glabel *l = &AT(b->labels, glabel, gt->first_label + i);
        int rc = l->is_num ? ppk_sample_push_label_num(s, l->key, l->num, (ppk_str){0})
                           : ppk_sample_push_label_str(s, l->key, l->str);
        if (rc) c->labels_refused++; /* e.g. a tag with the key of a built-in label */
    }
    if (refused) c->labels_refused++;
    if (sp->wall_idx >= 0) ppk_sample_set_value(s, (size_t)sp->wall_idx, gt->wall_ns);
    if (sp->cpu_idx >= 0) ppk_sample_set_value(s, (size_t)sp->cpu_idx, cpu);
    if (sp->count_idx >= 0) ppk_sample_set_value(s, (size_t)sp->count_idx, 1);
    if (ppk_sample_flush(s))
        c->failed++;
    else
        c->samples++;
}

/* The main thread's wall time since its previous sample, and the CPU time charged to
 * this sample. A thread found blocking at this tick spent its CPU time since the
 * previous sample running Python code elsewhere (or in a C call that released the GIL,
 * which this cannot tell apart): that time is carried to its next sample that finds it
 * running, a sample at an instant drawn from its running time. A thread blocked since
 * the previous tick ran no Python code since: its CPU time was spent where it blocks.
 * (What is carried when sampling stops is not recorded: at most the CPU time of one
 * run between two blocking calls.) */
static int64_t main_deltas(SamplerObject *sp, gthread *gt, int64_t now) {
    int64_t cpu_now = sp->cpu_idx >= 0 ? thread_cpu_ns(gt->native_id) : 0;
    int64_t d = cpu_now >= 0 && sp->main_cpu_ns >= 0 ? cpu_now - sp->main_cpu_ns : 0;
    if (d < 0) d = 0;
    gt->wall_ns = now > sp->main_wall_ns ? now - sp->main_wall_ns : 0;
    sp->main_wall_ns = now;
    sp->main_cpu_ns = cpu_now;
    if (gt->main_mode == MAIN_BLOCKING) {
        sp->main_cpu_carry += d;
        return 0;
    }
    if (gt->main_mode == MAIN_BLOCKED) return d;
    d += sp->main_cpu_carry;
    sp->main_cpu_carry = 0;
    return d;
}

/* Phase 2 for every thread gathered at `now`; swaps the slot tables. */
static void record_all(SamplerObject *sp, int64_t now, rec_counts *c) {
    memset(sp->next_slots, 0, sp->slot_cap * sizeof *sp->next_slots);
    for (size_t i = 0; i < sp->tick.threads.n; i++) {
        gthread *gt = &AT(sp->tick.threads, gthread, i);
        if (gt->ident == sp->main_ident) {
            int64_t cpu = main_deltas(sp, gt, now);
            record_thread(sp, sp->builder, &sp->tick, gt, cpu, c);
            continue;
        }
        unsigned long native = gt->native_id ? gt->native_id : 1;
        tslot *prev = slot_find(sp->slots, sp->slot_cap, gt->ident, native);
        int64_t cpu_now = sp->cpu_idx >= 0 ? thread_cpu_ns(gt->native_id) : 0;
        int64_t cpu = 0;
        if (prev->native_id) {
            gt->wall_ns = now - prev->wall_ns;
            if (cpu_now >= 0 && prev->cpu_ns >= 0) cpu = cpu_now - prev->cpu_ns;
        } else {
            /* New since the previous tick: it started after it; its whole CPU time is
             * from since then. */
            gt->wall_ns = now - sp->prev_tick_ns;
            cpu = cpu_now;
        }
        if (cpu < 0) cpu = 0;
        if (gt->wall_ns < 0) gt->wall_ns = 0;
        tslot *next = slot_find(sp->next_slots, sp->slot_cap, gt->ident, native);
        *next = (tslot){gt->ident, native, now, cpu_now};
        record_thread(sp, sp->builder, &sp->tick, gt, cpu, c);
    }
    tslot *t = sp->slots;
    sp->slots = sp->next_slots;
    sp->next_slots = t;
    sp->prev_tick_ns = now;
}

/* ---- The main thread's callback ---------------------------------------------------- */

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
    RecorderObject *r = sp->recorder;
    if (!r->rec || r->closing) return 0;
    int64_t now = mono_ns();
    gbuf *b = &sp->cb;
    b->frames.n = b->labels.n = b->threads.n = 0;
    running_task tasks[MAX_LOOPS];
    size_t n_tasks = running_tasks(tasks, MAX_LOOPS);
    rec_counts c = {0, 0, 0};
    PyThreadState *t = PyThreadState_Get();
    if (gather_thread(sp, b, t, threads_by_ident(), tasks, n_tasks) == 0 && b->threads.n) {
        gthread *gt = &AT(b->threads, gthread, 0);
        gt->main_mode = MAIN_RUNNING;
        int64_t cpu = main_deltas(sp, gt, now);
        record_thread(sp, sp->cb_builder, b, gt, cpu, &c);
    }
    /* The gathered strings were copied by the pushes: the references can go with the
     * sampler's next pass. */
    int64_t end = mono_ns();
    pthread_mutex_lock(&sp->lock);
    sp->main_callbacks++;
    sp->main_callback_ns_total += (uint64_t)(end - now);
    sp->samples += c.samples;
    sp->samples_failed += c.failed;
    sp->labels_refused += c.labels_refused;
    pthread_mutex_unlock(&sp->lock);
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

static void *sampler_main(void *arg) {
    SamplerObject *sp = arg;
    int64_t deadline = mono_ns();
    uint64_t rng = (uint64_t)deadline ^ (uint64_t)(uintptr_t)sp;
    for (;;) {
        /* Deadlines are a period apart on average, each drawn uniformly from half to
         * one and a half periods: a program that does something every period (a loop
         * with a 10 ms sleep) is then not always caught at the same point of it. */
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        deadline += sp->period_ns / 2 + (int64_t)((rng >> 33) % (uint64_t)sp->period_ns);
        pthread_mutex_lock(&sp->lock);
        while (!sp->stop) {
            struct timespec ts = {deadline / 1000000000, deadline % 1000000000};
            if (pthread_cond_timedwait(&sp->wake, &sp->lock, &ts) == ETIMEDOUT) break;
        }
        int stop = sp->stop;
        pthread_mutex_unlock(&sp->lock);
        if (stop || finalizing()) break;

        /* Ask the main thread to sample itself, unless the last request is still
         * pending (it has run no bytecode since: the pass below samples it). */
        int st = atomic_load(&sp->main_state);
        sp->main_request_failed = 0;
        if ((st == MAIN_IDLE || st == MAIN_DONE) && sp->main_ident) {
            atomic_store(&sp->main_state, MAIN_REQUESTED);
            if (Py_AddPendingCall(main_callback, NULL) == 0) {
                ppk_py_wake_main(sp->interp, atomic_load(&sp->main_ts));
            } else {
                atomic_store(&sp->main_state, MAIN_IDLE); /* the queue is full */
                sp->main_request_failed = 1;
            }
        }

        int64_t t0 = mono_ns();
        PyEval_RestoreThread(sp->ts);
        int64_t t1 = mono_ns();
        RecorderObject *r = sp->recorder;
        int open = r->rec && !r->closing;
        int ok = open && gather(sp) == 0 && slots_reserve(sp, sp->tick.threads.n) == 0;
        if (ok) atomic_fetch_add(&r->busy, 1);
        int64_t t2 = mono_ns();
        PyEval_SaveThread();
        if (!open) break; /* the recorder was closed under the sampler */
        rec_counts c = {0, 0, 0};
        if (ok) {
            record_all(sp, t1, &c);
            atomic_fetch_sub(&r->busy, 1);
        }
        int64_t t3 = mono_ns();

        struct timespec own;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own);
        pthread_mutex_lock(&sp->lock);
        sp->ticks++;
        sp->samples += c.samples;
        sp->samples_failed += c.failed;
        sp->labels_refused += c.labels_refused;
        uint64_t wait = (uint64_t)(t1 - t0), hold = (uint64_t)(t2 - t1);
        sp->gil_wait_ns_total += wait;
        if (wait > sp->gil_wait_ns_max) sp->gil_wait_ns_max = wait;
        sp->gil_hold_ns_total += hold;
        if (hold > sp->gil_hold_ns_max) sp->gil_hold_ns_max = hold;
        sp->tick_ns_total += (uint64_t)(t3 - t1);
        sp->cpu_ns = (int64_t)own.tv_sec * 1000000000 + own.tv_nsec;
        if (t3 > deadline + sp->period_ns) {
            /* Late by more than a period (a long GIL wait): skip the missed ticks
             * rather than sampling in a burst; the wall time covers the gap. */
            sp->ticks_late++;
            deadline = t3;
        }
        pthread_mutex_unlock(&sp->lock);
    }
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
    pthread_condattr_destroy(&ca);
    return rc ? -1 : 0;
}

/* Releases what the passes kept and the buffers (with the GIL, the thread stopped). */
static void free_buffers(SamplerObject *sp) {
    release_refs(sp);
    if (sp->fcache) {
        for (size_t i = 0; i < FCACHE_SIZE; i++) Py_XDECREF(sp->fcache[i].code);
        free(sp->fcache);
        sp->fcache = NULL;
    }
    gbuf_free(&sp->tick);
    gbuf_free(&sp->cb);
    vec_free(&sp->refs);
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
    if (slots_reserve(sp, n + 1)) return -1;
    memset(sp->slots, 0, sp->slot_cap * sizeof *sp->slots);
    for (PyThreadState *t = PyInterpreterState_ThreadHead(sp->interp); t;
         t = PyThreadState_Next(t)) {
        unsigned long native = t->native_thread_id ? t->native_thread_id : 1;
        tslot *s = slot_find(sp->slots, sp->slot_cap, t->thread_id, native);
        *s = (tslot){t->thread_id, native, now,
                     sp->cpu_idx >= 0 ? thread_cpu_ns(t->native_thread_id) : 0};
        if (t->thread_id == sp->main_ident) {
            sp->main_wall_ns = now;
            sp->main_cpu_ns = s->cpu_ns;
            sp->main_cpu_carry = 0;
        }
    }
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

/* Frees what start() set up for the thread (with the GIL; the thread is not running). */
static void release_thread_state(SamplerObject *sp) {
    if (sp->ts) {
        PyThreadState_Clear(sp->ts);
        PyThreadState_Delete(sp->ts);
        sp->ts = NULL;
    }
    if (main_sampler == sp) main_sampler = NULL;
    atomic_store(&sp->main_state, MAIN_IDLE);
    /* After Recorder.close too: the GIL is held. */
    ppk_sample_free(sp->builder);
    ppk_sample_free(sp->cb_builder);
    sp->builder = sp->cb_builder = NULL;
    free_buffers(sp);
}

static int sampler_start(SamplerObject *sp) {
    if (sp->running) return 0;
    if (ppk_py_recorder_check_open(sp->recorder)) return -1;
    int rc = ppk_sample_create(sp->recorder->rec, &sp->builder);
    if (!rc) rc = ppk_sample_create(sp->recorder->rec, &sp->cb_builder);
    if (rc) {
        ppk_sample_free(sp->builder);
        sp->builder = NULL;
        ppk_py_error(rc, "Sampler.start", NULL);
        return -1;
    }
    sp->interp = PyThreadState_GetInterpreter(PyThreadState_Get());
    /* One sampler at a time samples the main thread from inside it; another one
     * started meanwhile samples it from its pass, like the other threads. */
    sp->main_ident = main_sampler ? 0 : main_thread_ident();
    atomic_store(&sp->main_state, MAIN_IDLE);
    sp->fcache = calloc(FCACHE_SIZE, sizeof *sp->fcache);
    sp->ts = sp->fcache ? PyThreadState_New(sp->interp) : NULL;
    if (!sp->ts || baseline(sp, mono_ns())) {
        release_thread_state(sp);
        PyErr_NoMemory();
        return -1;
    }
    sp->stop = 0;
    if (pthread_create(&sp->thread, NULL, sampler_main, sp)) {
        release_thread_state(sp);
        ppk_py_error(PPK_ESYS, "Sampler.start", "pthread_create failed");
        return -1;
    }
    sp->running = 1;
    if (sp->main_ident) main_sampler = sp;
    return 0;
}

/* Stops and joins the thread (with the GIL released), then frees its state. */
static void sampler_stop(SamplerObject *sp) {
    if (!sp->running) return;
    pthread_mutex_lock(&sp->lock);
    sp->stop = 1;
    pthread_cond_signal(&sp->wake);
    pthread_mutex_unlock(&sp->lock);
    PyThreadState *save = PyEval_SaveThread();
    pthread_join(sp->thread, NULL);
    PyEval_RestoreThread(save);
    sp->running = 0;
    release_thread_state(sp);
}

static void after_fork_child(SamplerObject *sp) {
    /* The thread, and the thread state it had (CPython deleted it in the child), are
     * gone; what it held is this thread's to release, with the GIL. */
    sp->ts = NULL;
    sp->running = 0;
    init_sync(sp);
    if (main_sampler == sp) main_sampler = NULL;
    atomic_store(&sp->main_state, MAIN_IDLE);
    ppk_sample_free(sp->builder);
    ppk_sample_free(sp->cb_builder);
    sp->builder = sp->cb_builder = NULL;
    free_buffers(sp);
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
    static char *kwlist[] = {"recorder",  "rate_hz",     "wall_index", "cpu_index",
                             "count_index", "tags_thread", "tags_task", NULL};
    PyObject *rec_obj, *wall = NULL, *cpu = NULL, *count = NULL, *tt = NULL, *tk = NULL;
    double rate = 100.0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|$dOOOOO", kwlist, &ppk_py_RecorderType,
                                     &rec_obj, &rate, &wall, &cpu, &count, &tt, &tk))
        return NULL;
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
    gbuf_init(&sp->tick);
    gbuf_init(&sp->cb);
    sp->refs = VEC(PyObject *);
    return (PyObject *)sp;
}

static void Sampler_dealloc(SamplerObject *sp) {
    sampler_stop(sp);
    free_buffers(sp);
    pthread_cond_destroy(&sp->wake);
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
    sampler_stop(sp);
    Py_RETURN_NONE;
}

static PyObject *Sampler_after_fork_child(SamplerObject *sp, PyObject *unused) {
    (void)unused;
    int was_running = sp->running;
    after_fork_child(sp);
    if (was_running && sp->recorder->rec && sampler_start(sp)) return NULL;
    Py_RETURN_NONE;
}

static PyObject *Sampler_stats(SamplerObject *sp, PyObject *unused) {
    (void)unused;
    pthread_mutex_lock(&sp->lock);
    uint64_t v[] = {sp->ticks,
                    sp->samples,
                    sp->samples_failed,
                    sp->labels_refused,
                    sp->ticks_late,
                    sp->gil_wait_ns_total,
                    sp->gil_wait_ns_max,
                    sp->gil_hold_ns_total,
                    sp->gil_hold_ns_max,
                    sp->tick_ns_total,
                    (uint64_t)sp->cpu_ns,
                    sp->main_callbacks,
                    sp->main_callback_ns_total,
                    sp->main_blocked};
    pthread_mutex_unlock(&sp->lock);
    static const char *const names[] = {
        "ticks",          "samples",          "samples_failed",         "labels_refused",
        "ticks_late",     "gil_wait_ns_total", "gil_wait_ns_max",       "gil_hold_ns_total",
        "gil_hold_ns_max", "tick_ns_total",    "cpu_ns",                "main_callbacks",
        "main_callback_ns_total", "main_blocked"};
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < sizeof v / sizeof v[0]; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[i]);
        if (!x || PyDict_SetItemString(d, names[i], x)) Py_CLEAR(d);
        Py_XDECREF(x);
    }
    return d;
}

static PyObject *Sampler_get_running(SamplerObject *sp, void *closure) {
    (void)closure;
    return PyBool_FromLong(sp->running);
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
    {"_after_fork_child", (PyCFunction)Sampler_after_fork_child, METH_NOARGS,
     "In a forked child: forget the parent's thread, start a new one if it ran."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ppk_py_SamplerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pprofkit.Sampler",
    .tp_basicsize = sizeof(SamplerObject),
    .tp_dealloc = (destructor)Sampler_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sampler(recorder, *, rate_hz=100.0, wall_index=None, cpu_index=None, "
              "count_index=None, tags_thread=None, tags_task=None)\n\n"
              "A native thread that samples every Python thread rate_hz times a second into "
              "the recorder: frames, thread and asyncio task labels, wall and CPU time "
              "(ns) and a count at the given sample type indices (None: not recorded).",
    .tp_methods = Sampler_methods,
    .tp_getset = Sampler_getset,
    .tp_new = Sampler_new,
};

int ppk_py_sampler_ready(void) {
    if (!str_name) {
        str_name = PyUnicode_InternFromString("_name");
        str_thread_id = PyUnicode_InternFromString("_thread_id");
        str_get_name = PyUnicode_InternFromString("get_name");
        str_active = PyUnicode_InternFromString("_active");
        str_current_tasks = PyUnicode_InternFromString("_current_tasks");
        str_Task = PyUnicode_InternFromString("Task");
        if (!str_name || !str_thread_id || !str_get_name || !str_active ||
            !str_current_tasks || !str_Task)
            return -1;
    }
    return PyType_Ready(&ppk_py_SamplerType);
}
