/*
 * sampler_tasks.c - the Sampler's asyncio tasks that wait (sampler.c explains the
 * whole): at each tick, one sample per task that is not done and not running, whose
 * stack is the task's coroutine chain (its coroutine's frame, then the coroutine or
 * generator it awaits, and so on; leaf first, as pprof reads) and whose labels are the
 * task's name and id, the thread running its loop, and the task awaiting it ("parent
 * task", "parent task id") when one is known. A running task is not sampled here: its
 * thread's sample shows it, on the thread's real stack, with its name. Values: the wall
 * time since the task's previous sample; no CPU time (a waiting task uses none). Label
 * "task state" tells these samples from the threads': "waiting" (on a future) or "ready"
 * (to run, scheduled).
 *
 * Where the tasks are: asyncio's task set (asyncio.tasks._all_tasks on 3.11,
 * _scheduled_tasks on 3.12 and 3.13: a WeakSet whose `data` is a set of weak references
 * to the tasks; the tasks of 3.12's eager set are running, so not sampled here). The
 * set's hash table (PySetObject, public in the 3.11 to 3.13 headers) is scanned from a
 * cursor that goes on from tick to tick, at most max_tasks tasks per tick: with more
 * live tasks than that, the ticks rotate through them, each task's wall time being the
 * time since its own previous sample, so totals stay right; a task not seen in a whole
 * scan of the table has ended.
 *
 * Reading a task runs no Python code: its attributes are read through the getset
 * descriptors of _asyncio's C Future and Task types (C getters) when its type's
 * attribute is that descriptor, else as plain instance attributes (the pure-Python
 * Task); a chain's links through the getsets of the exact coroutine and generator types
 * (cr_frame, cr_await, gi_frame, gi_yieldfrom).
 *
 * A waiting task costs little at a tick where it has not moved: its _fut_waiter, the
 * future it waits on, is the one it waited on when its chain was last read (compared
 * through a weak reference, so an address reused by a new future does not match; a
 * future that is waited on is not done, and a task that resumes waits on another one
 * or none). Such a task's tick adds its wall time to the task's entry; the entry is
 * recorded as one sample (count = its ticks) once it holds `coalesce` periods of wall
 * time, when its stack changes and when it ends, and at stop: what an export holds can
 * lag by that much, never more. A task that moved costs ~25 times more (its chain is
 * read again): at most max_tasks / 40 are read a tick, the scan stopping there. An
 * entry holds references to what its stack's strings belong to (codes, names, tags), so
 * the stack stays valid until it is recorded; they are released at the pass after it
 * was (with the GIL, like the pass's own).
 *
 * The parent task is found from the task's done callbacks: another task's wakeup (a C
 * function or a method bound to it: `await task`), TaskGroup._on_task_done (the group's
 * _parent_task), or a closure over a future whose own callbacks wake a task up (gather's
 * outer future, asyncio.wait's waiter). A label rather than the parent's frames as
 * the root of the child's stack: each task's samples then sum to that task's own
 * lifetime (a parent waiting on two children is not counted three times under its
 * frames), and a link that cannot be found (it rests on asyncio's private objects, no
 * graph of awaiters exists before 3.14) only loses a label instead of changing where
 * the time goes.
 */
#include "sampler.h"

enum { A_CORO, A_FUT_WAITER, A_LOOP, A_STATE, A_CALLBACKS, N_ATTRS };

static const char *const attr_text[N_ATTRS] = {"_coro", "_fut_waiter", "_loop", "_state",
                                               "_callbacks"};
/* Interned names. */
static PyObject *attr_name[N_ATTRS];
/* _asyncio.Task's and _asyncio.Future's getset descriptors of those names (each type has
 * its own), found once _asyncio is imported. */
static PyObject *c_descr[2][N_ATTRS];
/* _asyncio.Task and Future, asyncio's pure-Python Task and Future. */
static PyTypeObject *c_task_type, *c_future_type, *py_task_type, *py_future_type;
static PyObject *s_asyncio_tasks, *s_task_set, *s_data, *s_thread_id, *s_name, *s_parent_task,
    *s__asyncio, *s_Task, *s_Future, *s_PyTask, *s_PyFuture, *s_asyncio_futures, *s_cr_frame,
    *s_cr_await, *s_gi_frame, *s_gi_yieldfrom, *s_pending;
static int descr_ready; /* the types and descriptors were looked up */

/* The "task state" label: waiting on a future, or ready to run (scheduled). */
static const ppk_str S_WAITING = PPK_STR("waiting"), S_READY = PPK_STR("ready");

/* The deepest chain read (deeper links are left out, the root side). */
#define MAX_TASK_FRAMES 256

/* What a task showed when its chain was last read: frames (leaf first), labels, and
 * the references that keep their strings alive. One allocation. */
typedef struct tstack {
    gthread gt; /* ident, native_id, name, task_name, task_id, parent_*, n_frames, n_labels */
    gframe *frames;
    glabel *labels; /* pprofkit.tag() labels of the task */
    PyObject *name, *tags; /* the task's name and tags then (held: only compared) */
    PyObject *thread_name; /* its loop's thread's name (held) */
    uint32_t visits;       /* ticks it was found unchanged, while it has no parent */
    PyObject **refs;
    size_t n_refs;
} tstack;

#define TOMB ((PyObject *)1)

typedef struct tentry {
    PyObject *task;   /* the key, not a reference (NULL: empty; TOMB: deleted) */
    PyObject *wr;     /* a reference to a weak reference to the task (the task set's) */
    PyObject *fut_wr; /* one to a weak reference to the future it waited on when its
                       * chain was read (NULL: none) */
    PyObject *fut;    /* its _fut_waiter at its last visit (only compared and prefetched;
                       * NULL: none) */
    tstack *stack;    /* NULL: not read, running, done, or its loop not running */
    int64_t last_ns;  /* its previous sample (0: none; its first counts one interval) */
    int64_t acc_wall; /* not recorded yet: wall time, ticks */
    uint64_t acc_count;
    uint64_t cycle; /* the scan of the task set it was last visited in */
    int done;       /* the task is done: skipped from now on */
} tentry;

/* A stack replaced or ended, with what it had not recorded yet. */
typedef struct retired {
    tstack *st;
    int64_t wall;
    uint64_t count;
} retired;

/* An element of the task set met at this pass. */
typedef struct tslotv {
    PyObject *key, *task; /* the weak reference, its task (NULL: dead) */
    size_t pos;           /* in the set's table */
} tslotv;

/* The running loops seen at this pass: their thread. */
typedef struct loopinfo {
    PyObject *loop; /* only compared */
    unsigned long ident, native_id;
    PyObject *name; /* the thread's name (a reference kept until the next pass), or NULL */
} loopinfo;

typedef struct task_table {
    tentry *e;
    size_t cap, used, tombs; /* power-of-two capacity, at most half full with tombs */
    size_t cursor;           /* in the task set's hash table */
    size_t sweep_cursor;     /* in this table (sweep) */
    uint64_t cycle;
    size_t cycle_visits;     /* entries visited in this cycle */
    vec slots;               /* tslotv: the task set's elements visited at this pass */
    vec seen, walk;          /* entry indices of this pass: those sampled, those whose
                              * chain is read */
    vec retired;             /* retired: recorded in phase 2 */
    /* After a pass that visited every live task: the entries it sampled (seen), the
     * task set's size then, and the CPU clocks then of the threads running their loops
     * (their kernel thread ids). */
    vec quiet;
    size_t quiet_live, quiet_fill;
    size_t n_quiet_threads;
    unsigned long quiet_tid[MAX_LOOPS];
    int64_t quiet_cpu[MAX_LOOPS];
    vec recorded;            /* tstack *: recorded, released at the next pass */
    vec frames, labels;      /* scratch for a chain being read */
    loopinfo loops[MAX_LOOPS];
    size_t n_loops;
    size_t live, visits; /* tasks in the set, and visited, at this pass */
} task_table;

/* ---- Set-up ------------------------------------------------------------------------ */

static int intern_names(void) {
    if (s_data) return 0;
    for (int i = 0; i < N_ATTRS; i++)
        if (!(attr_name[i] = PyUnicode_InternFromString(attr_text[i]))) return -1;
    s_asyncio_tasks = PyUnicode_InternFromString("asyncio.tasks");
    s_task_set = PyUnicode_InternFromString(PY_VERSION_HEX >= 0x030C0000 ? "_scheduled_tasks"
                                                                          : "_all_tasks");
    s_thread_id = PyUnicode_InternFromString("_thread_id");
    s_name = PyUnicode_InternFromString("_name");
    s_parent_task = PyUnicode_InternFromString("_parent_task");
    s__asyncio = PyUnicode_InternFromString("_asyncio");
    s_Task = PyUnicode_InternFromString("Task");
    s_Future = PyUnicode_InternFromString("Future");
    s_PyTask = PyUnicode_InternFromString("_PyTask");
    s_PyFuture = PyUnicode_InternFromString("_PyFuture");
    s_asyncio_futures = PyUnicode_InternFromString("asyncio.futures");
    s_cr_frame = PyUnicode_InternFromString("cr_frame");
    s_cr_await = PyUnicode_InternFromString("cr_await");
    s_gi_frame = PyUnicode_InternFromString("gi_frame");
    s_gi_yieldfrom = PyUnicode_InternFromString("gi_yieldfrom");
    s_pending = PyUnicode_InternFromString("PENDING");
    if (!s_asyncio_tasks || !s_task_set || !s_thread_id || !s_name || !s_parent_task ||
        !s__asyncio || !s_Task || !s_Future || !s_PyTask || !s_PyFuture ||
        !s_asyncio_futures || !s_cr_frame || !s_cr_await || !s_gi_frame ||
        !s_gi_yieldfrom || !s_pending)
        return -1;
    s_data = PyUnicode_InternFromString("data"); /* last: marks the set-up done */
    return s_data ? 0 : -1;
}

int ppk_py_tasks_init(SamplerObject *sp) {
    if (intern_names()) {
        PyErr_Clear();
        return -1;
    }
    task_table *tt = calloc(1, sizeof *tt);
    if (!tt) return -1;
    tt->seen = tt->walk = tt->quiet = VEC(size_t);
    tt->slots = VEC(tslotv);
    tt->retired = VEC(retired);
    tt->recorded = VEC(tstack *);
    tt->frames = VEC(gframe);
    tt->labels = VEC(glabel);
    sp->tasks = tt;
    return 0;
}

/* A type of a module (a new reference), or NULL. */
static PyTypeObject *module_type(PyObject *mod, PyObject *name) {
    PyObject *t = ppk_py_module_attr(mod, name);
    return t && PyType_Check(t) ? (PyTypeObject *)Py_NewRef(t) : NULL;
}

/* asyncio's types and _asyncio.Task's descriptors, once asyncio is imported (with the
 * GIL). */
static void find_descriptors(void) {
    if (descr_ready) return;
    PyObject *type = ppk_py_module_attr(s__asyncio, s_Task);
    if (!type || !PyType_Check(type) || !ppk_py_module_attr(s_asyncio_tasks, s_PyTask)) return;
    c_task_type = module_type(s__asyncio, s_Task);
    c_future_type = module_type(s__asyncio, s_Future);
    py_task_type = module_type(s_asyncio_tasks, s_PyTask);
    py_future_type = module_type(s_asyncio_futures, s_PyFuture);
    for (int k = 0; k < 2; k++) {
        PyTypeObject *t = k ? c_future_type : c_task_type;
        for (int i = 0; t && i < N_ATTRS; i++) {
            PyObject *d = _PyType_Lookup(t, attr_name[i]);
            if (d && Py_IS_TYPE(d, &PyGetSetDescr_Type)) c_descr[k][i] = Py_NewRef(d);
        }
    }
    descr_ready = 1;
}

/* The last type whose attribute `which` was found to be one of those descriptors, at a
 * version of the type (a change to the type changes it), and the descriptor's getter. */
static struct {
    PyTypeObject *type;
    unsigned int version;
    getter get;
    void *closure;
} getter_cache[N_ATTRS];

/* Attribute `which` of a task or future, read without running Python code (a new
 * reference, or NULL). */
static PyObject *task_attr(PyObject *obj, int which) {
    PyTypeObject *t = Py_TYPE(obj);
    if (getter_cache[which].type == t && t->tp_version_tag == getter_cache[which].version &&
        t->tp_version_tag) {
        PyObject *v = getter_cache[which].get(obj, getter_cache[which].closure);
        if (!v) PyErr_Clear();
        return v;
    }
    PyObject *d = _PyType_Lookup(t, attr_name[which]);
    if (d && (d == c_descr[0][which] || d == c_descr[1][which]) &&
        t->tp_getattro == PyObject_GenericGetAttr) {
        PyGetSetDef *gs = ((PyGetSetDescrObject *)d)->d_getset;
        getter_cache[which].type = t; /* only compared: a type's address is reused only */
        getter_cache[which].version = t->tp_version_tag; /* with another version */
        getter_cache[which].get = gs->get;
        getter_cache[which].closure = gs->closure;
        PyObject *v = gs->get(obj, gs->closure);
        if (!v) PyErr_Clear();
        return v;
    }
    return ppk_py_safe_getattr(obj, attr_name[which]);
}

/* What weak reference wr points to, only to compare (NULL: dead). */
static PyObject *weak_target(PyObject *wr) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o;
    if (PyWeakref_GetRef(wr, &o) != 1) {
        PyErr_Clear();
        return NULL;
    }
    Py_DECREF(o); /* alive: a weak reference's target has other references */
    return o;
#else
    PyObject *o = PyWeakref_GetObject(wr);
    return o == Py_None ? NULL : o;
#endif
}

/* asyncio's task set's underlying set (a new reference), or NULL. */
static PyObject *task_set(void) {
    PyObject *ws = ppk_py_module_attr(s_asyncio_tasks, s_task_set);
    PyObject *data = ws ? ppk_py_safe_getattr(ws, s_data) : NULL;
    if (data && !PySet_Check(data)) Py_CLEAR(data);
    return data;
}

size_t ppk_py_tasks_live(void) {
    if (!s_data) return 0;
    PyObject *data = task_set();
    size_t n = data ? (size_t)PySet_GET_SIZE(data) : 0;
    Py_XDECREF(data);
    return n;
}

/* ---- The entry table --------------------------------------------------------------- */

static size_t ptr_hash(const void *p, size_t mask) {
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15u;
    return (size_t)(h >> 24) & mask;
}

/* The entry of `task`, new if needed (room was made by table_reserve). */
static size_t entry_get(task_table *tt, PyObject *task) {
    size_t mask = tt->cap - 1, tomb = SIZE_MAX;
    for (size_t i = ptr_hash(task, mask);; i = (i + 1) & mask) {
        tentry *e = &tt->e[i];
        if (e->task == task) return i;
        if (e->task == TOMB) {
            if (tomb == SIZE_MAX) tomb = i;
        } else if (!e->task) {
            if (tomb != SIZE_MAX) {
                i = tomb;
                tt->tombs--;
            }
            tt->e[i] = (tentry){.task = task};
            tt->used++;
            return i;
        }
    }
}

/* Room for `n` more entries (rehashing away the tombs). -1: no memory. */
static int table_reserve(task_table *tt, size_t n) {
    if ((tt->used + tt->tombs + n) * 2 <= tt->cap) return 0;
    size_t cap = 64;
    while (cap < (tt->used + n) * 2) cap *= 2;
    tentry *e = calloc(cap, sizeof *e);
    if (!e) return -1;
    for (size_t i = 0; i < tt->cap; i++) {
        tentry *o = &tt->e[i];
        if (!o->task || o->task == TOMB) continue;
        size_t j = ptr_hash(o->task, cap - 1);
        while (e[j].task) j = (j + 1) & (cap - 1);
        e[j] = *o;
    }
    free(tt->e);
    tt->e = e;
    tt->cap = cap;
    tt->tombs = 0;
    return 0;
}

/* The entry's stack, with what it accumulated, to be recorded in phase 2. */
static void retire(task_table *tt, tentry *e) {
    if (e->stack) {
        retired *r = vec_push(&tt->retired);
        if (r) {
            *r = (retired){e->stack, e->acc_wall, e->acc_count};
        } else {
            tstack **p = vec_push(&tt->recorded); /* not recorded: released anyway */
            if (p) *p = e->stack;                  /* (else lost: a leak, not a crash) */
        }
        e->stack = NULL;
    }
    e->acc_wall = 0;
    e->acc_count = 0;
    e->last_ns = 0;
}

/* Releases an entry's own references with the pass's (with the GIL). */
static void entry_clear(SamplerObject *sp, tentry *e) {
    if (e->wr) ppk_py_keep_ref(sp, e->wr);
    if (e->fut_wr) ppk_py_keep_ref(sp, e->fut_wr);
    e->wr = e->fut_wr = NULL;
}

/* Removes entry e: its stack to record, its references to release. */
static void entry_remove(SamplerObject *sp, task_table *tt, tentry *e) {
    retire(tt, e);
    entry_clear(sp, e);
    tt->cycle_visits -= e->cycle == tt->cycle;
    e->task = TOMB;
    tt->used--;
    tt->tombs++;
}

/* The end of a scan of the task set: the entries of tasks it did not meet are gone. */
static void end_cycle(SamplerObject *sp, task_table *tt) {
    for (size_t i = 0; tt->cycle_visits < tt->used && i < tt->cap; i++) {
        tentry *e = &tt->e[i];
        if (e->task && e->task != TOMB && e->cycle != tt->cycle) entry_remove(sp, tt, e);
    }
    tt->cycle++;
    tt->cycle_visits = 0;
}

/* Entries whose task has been freed, found SWEEP entries a pass, are removed without
 * waiting for the scan's cycle to end (which takes long when the ticks rotate through
 * many tasks): the table holds the live tasks, and the freed ones of a few passes. */
#define SWEEP 64

static void sweep(SamplerObject *sp, task_table *tt) {
    for (int k = 0; k < SWEEP && tt->cap; k++) {
        tentry *e = &tt->e[tt->sweep_cursor++ & (tt->cap - 1)];
        if (e->task && e->task != TOMB && e->wr && !weak_target(e->wr)) entry_remove(sp, tt, e);
    }
}

/* ---- Reading a task ---------------------------------------------------------------- */

/* The thread running `loop` (0: it is not running). */
static loopinfo *loop_of(SamplerObject *sp, task_table *tt, PyObject *loop, PyObject *active) {
    for (size_t i = 0; i < tt->n_loops; i++)
        if (tt->loops[i].loop == loop) return tt->loops[i].ident ? &tt->loops[i] : NULL;
    if (tt->n_loops == MAX_LOOPS) return NULL;
    loopinfo *li = &tt->loops[tt->n_loops++];
    *li = (loopinfo){loop, 0, 0, NULL};
    PyObject *tid = ppk_py_safe_getattr(loop, s_thread_id);
    if (tid && PyLong_Check(tid)) {
        li->ident = PyLong_AsUnsignedLong(tid);
        if (PyErr_Occurred()) {
            PyErr_Clear();
            li->ident = 0;
        }
    }
    Py_XDECREF(tid);
    if (!li->ident) return NULL;
    for (PyThreadState *t = PyInterpreterState_ThreadHead(sp->interp); t;
         t = PyThreadState_Next(t))
        if (t->thread_id == li->ident) li->native_id = t->native_thread_id;
    PyObject *ident = PyLong_FromUnsignedLong(li->ident);
    PyObject *thread = active && ident ? PyDict_GetItemWithError(active, ident) : NULL;
    if (!thread) PyErr_Clear();
    Py_XDECREF(ident);
    PyObject *name = thread ? ppk_py_safe_getattr(thread, s_name) : NULL;
    if (name && !ppk_py_keep_ref(sp, name)) li->name = name;
    return li;
}

/* The frames of a coroutine chain into tt->frames, leaf first. */
static void read_chain(SamplerObject *sp, task_table *tt, PyObject *coro) {
    tt->frames.n = 0;
    PyObject *o = Py_XNewRef(coro);
    while (o && tt->frames.n < MAX_TASK_FRAMES) {
        PyObject *fname, *aname;
        if (PyCoro_CheckExact(o)) {
            fname = s_cr_frame;
            aname = s_cr_await;
        } else if (PyGen_CheckExact(o)) {
            fname = s_gi_frame;
            aname = s_gi_yieldfrom;
        } else {
            break; /* a future's iterator, an async generator's asend: the end */
        }
        PyObject *f = PyObject_GetAttr(o, fname);
        if (!f) PyErr_Clear();
        int ok = 1;
        if (f && PyFrame_Check(f)) {
            gframe *g = vec_push(&tt->frames);
            ok = g && !ppk_py_frame_of(sp, (PyFrameObject *)f, g);
            if (g && !ok) tt->frames.n--;
        }
        Py_XDECREF(f);
        PyObject *next = ok ? PyObject_GetAttr(o, aname) : NULL;
        if (!next) PyErr_Clear();
        Py_DECREF(o);
        o = next;
    }
    Py_XDECREF(o);
    gframe *a = tt->frames.items;
    for (size_t i = 0, j = tt->frames.n; i + 1 < j; i++, j--) {
        gframe t = a[i];
        a[i] = a[j - 1];
        a[j - 1] = t;
    }
}

/* Whether o is an asyncio task (C or pure Python), or a future. */
static int is_task(PyObject *o) {
    return o && ((c_task_type && PyObject_TypeCheck(o, c_task_type)) ||
                 (py_task_type && PyObject_TypeCheck(o, py_task_type)));
}

static int is_future(PyObject *o) {
    return o && ((c_future_type && PyObject_TypeCheck(o, c_future_type)) ||
                 (py_future_type && PyObject_TypeCheck(o, py_future_type)));
}

/* The task a done callback wakes up (a task's wakeup: a C function or a method bound to
 * the task), or NULL. */
static PyObject *woken_by(PyObject *fn) {
    PyObject *self = PyCFunction_Check(fn) ? PyCFunction_GET_SELF(fn)
                     : PyMethod_Check(fn)  ? PyMethod_GET_SELF(fn)
                                           : NULL;
    return is_task(self) ? self : NULL;
}

/* The function of each (function, context) pair of a future's callback list. */
static PyObject *callback_fn(PyObject *cbs, Py_ssize_t i) {
    PyObject *fn = PyList_GET_ITEM(cbs, i);
    return PyTuple_Check(fn) && PyTuple_GET_SIZE(fn) ? PyTuple_GET_ITEM(fn, 0) : fn;
}

/* The task that a done callback of a future `fut` wakes up, or NULL. */
static PyObject *woken_by_future(PyObject *fut) {
    PyObject *p = NULL, *cbs = task_attr(fut, A_CALLBACKS);
    for (Py_ssize_t i = 0; !p && cbs && PyList_Check(cbs) && i < PyList_GET_SIZE(cbs); i++)
        p = woken_by(callback_fn(cbs, i));
    Py_XDECREF(cbs);
    return p; /* alive: fut's callbacks hold it */
}

/* The task awaiting `task` (borrowed: the callbacks of task, or of a future they hold,
 * hold it), or NULL. The file's opening comment says how it is found. */
static PyObject *parent_of(PyObject *task) {
    PyObject *p = NULL, *cbs = task_attr(task, A_CALLBACKS);
    for (Py_ssize_t i = 0; !p && cbs && PyList_Check(cbs) && i < PyList_GET_SIZE(cbs); i++) {
        PyObject *fn = callback_fn(cbs, i);
        p = woken_by(fn); /* await task */
        if (!p && PyMethod_Check(fn)) {
            /* TaskGroup._on_task_done: the group's task. */
            PyObject *pt = ppk_py_safe_getattr(PyMethod_GET_SELF(fn), s_parent_task);
            p = is_task(pt) ? pt : NULL;
            Py_XDECREF(pt); /* the group holds it */
        } else if (!p && PyFunction_Check(fn)) {
            /* A closure over the future its awaiter waits on: gather's outer future,
             * asyncio.wait's waiter. */
            PyObject *cl = PyFunction_GET_CLOSURE(fn);
            for (Py_ssize_t j = 0; !p && cl && PyTuple_Check(cl) && j < PyTuple_GET_SIZE(cl); j++) {
                PyObject *cell = PyTuple_GET_ITEM(cl, j);
                PyObject *v = PyCell_Check(cell) ? PyCell_GET(cell) : NULL;
                if (is_future(v) && !is_task(v)) p = woken_by_future(v);
            }
        }
    }
    Py_XDECREF(cbs);
    return p != task ? p : NULL;
}

/* Whether stack st shows the frames of tt->frames, and the same name, tags, thread and
 * parent. */
static int same_stack(const tstack *st, const task_table *tt, PyObject *name, PyObject *tags,
                      const loopinfo *li, PyObject *parent, ppk_str state) {
    int same_name = st->name == name ||
                    (st->name && name && PyUnicode_Check(st->name) && PyUnicode_Check(name) &&
                     PyUnicode_Compare(st->name, name) == 0);
    if (st->gt.n_frames != tt->frames.n || !same_name || st->tags != tags ||
        st->gt.task_state.ptr != state.ptr ||
        st->gt.ident != li->ident ||
        st->gt.parent_id != (int64_t)(uintptr_t)parent)
        return 0;
    for (size_t i = 0; i < tt->frames.n; i++) {
        const gframe *a = &st->frames[i], *b = &AT(tt->frames, gframe, i);
        if (a->code != b->code || a->lasti != b->lasti) return 0;
    }
    return 1;
}

/* Takes a reference for a stack. */
static void take(tstack *st, PyObject *o) {
    if (o) st->refs[st->n_refs++] = Py_NewRef(o);
}

/* A new stack of tt->frames for `task`. NULL: no memory. */
static tstack *new_stack(task_table *tt, PyObject *task, PyObject *name, PyObject *tags,
                         const loopinfo *li, PyObject *parent, ppk_str state) {
    tt->labels.n = 0;
    size_t nl = tags ? ppk_py_tag_labels(tags, &tt->labels) : 0;
    size_t nf = tt->frames.n, nr = nf + 6;
    tstack *st = malloc(sizeof *st + nf * sizeof(gframe) + nl * sizeof(glabel) +
                        nr * sizeof(PyObject *));
    if (!st) return NULL;
    memset(&st->gt, 0, sizeof st->gt);
    st->frames = (gframe *)(st + 1);
    st->labels = (glabel *)(st->frames + nf);
    st->refs = (PyObject **)(st->labels + nl);
    st->n_refs = 0;
    st->name = name;
    st->tags = tags;
    st->thread_name = li->name;
    st->visits = 0;
    memcpy(st->frames, tt->frames.items, nf * sizeof(gframe));
    if (nl) memcpy(st->labels, tt->labels.items, nl * sizeof(glabel));
    for (size_t i = 0; i < nf; i++) take(st, (PyObject *)st->frames[i].code);
    take(st, tags);
    gthread *gt = &st->gt;
    gt->n_frames = nf;
    gt->n_labels = nl;
    gt->ident = li->ident;
    gt->native_id = li->native_id;
    if (li->name) {
        gt->name = ppk_py_utf8(li->name);
        take(st, li->name);
    }
    gt->task_id = (int64_t)(uintptr_t)task;
    gt->task_state = state;
    PyObject *bytes;
    if (name) {
        gt->task_name = ppk_py_utf8_repair(name, &bytes);
        take(st, name);
        take(st, bytes);
        Py_XDECREF(bytes);
    }
    if (parent) {
        gt->parent_id = (int64_t)(uintptr_t)parent;
        name = ppk_py_task_name(parent);
        if (name) {
            gt->parent_name = ppk_py_utf8_repair(name, &bytes);
            take(st, name);
            take(st, bytes);
            Py_XDECREF(bytes);
            Py_DECREF(name);
        }
    }
    return st;
}

/* A stack for entry e's task with the parent it has now, if it has one. */
static void find_parent_again(task_table *tt, tentry *e) {
    tstack *old = e->stack;
    PyObject *parent = parent_of(e->task);
    if (!parent) return;
    tt->frames.n = 0;
    if (vec_reserve(&tt->frames, old->gt.n_frames)) return;
    memcpy(tt->frames.items, old->frames, old->gt.n_frames * sizeof(gframe));
    tt->frames.n = old->gt.n_frames;
    loopinfo li = {NULL, old->gt.ident, old->gt.native_id, old->thread_name};
    tstack *st = new_stack(tt, e->task, old->name, old->tags, &li, parent, old->gt.task_state);
    if (!st) return;
    int64_t last = e->last_ns;
    retire(tt, e); /* what it accumulated goes with the old stack */
    e->last_ns = last;
    e->stack = st;
}

/* Takes a weak reference to the future entry e waits on, for the next passes' check. */
static void note_future(SamplerObject *sp, tentry *e) {
    if (e->fut_wr) ppk_py_keep_ref(sp, e->fut_wr);
    e->fut_wr = e->fut ? PyWeakref_NewRef(e->fut, NULL) : NULL;
    if (!e->fut_wr) PyErr_Clear(); /* not weakly referenceable: read at every tick */
}

/* Reads the chain of entry i's task (it moved, or is new). */
static void walk_task(SamplerObject *sp, task_table *tt, size_t i, PyObject *active) {
    tentry *e = &tt->e[i];
    PyObject *task = e->task;
    /* A task's loop is the one it was made in: a task read before keeps its thread. */
    loopinfo kept, *li = NULL;
    if (e->stack) {
        kept = (loopinfo){NULL, e->stack->gt.ident, e->stack->gt.native_id, e->stack->thread_name};
        li = &kept;
    } else {
        PyObject *loop = task_attr(task, A_LOOP);
        li = loop ? loop_of(sp, tt, loop, active) : NULL;
        Py_XDECREF(loop); /* the task holds it */
    }
    if (!li) {
        retire(tt, e); /* its loop is not running */
        return;
    }
    PyObject *coro = task_attr(task, A_CORO);
    read_chain(sp, tt, coro);
    Py_XDECREF(coro);
    if (!tt->frames.n) {
        retire(tt, e);
        return;
    }
    PyObject *parent = parent_of(task);
    PyObject *name = ppk_py_task_name(task), *tags = NULL;
    if (sp->tags_task && PyDict_GET_SIZE(sp->tags_task)) {
        PyObject *key = PyLong_FromVoidPtr(task);
        if (!key) PyErr_Clear();
        tags = ppk_py_tags_of(sp->tags_task, key);
        Py_XDECREF(key);
    }
    ppk_str state = e->fut ? S_WAITING : S_READY;
    if (!e->stack || !same_stack(e->stack, tt, name, tags, li, parent, state)) {
        tstack *st = new_stack(tt, task, name, tags, li, parent, state);
        Py_XDECREF(name);
        if (!st) return;
        retire(tt, e);
        e->stack = st;
    } else {
        Py_XDECREF(name); /* the stack holds it */
    }
    note_future(sp, e);
    size_t *p = vec_push(&tt->seen);
    if (p) *p = i;
}

/* Visits the task the task set's element `key` refers to. */
static void visit(SamplerObject *sp, task_table *tt, PyObject *key, PyObject *task,
                  const running_task *running, size_t n_running) {
    if (!task || (tt->used + tt->tombs + 1) * 4 > tt->cap * 3) return;
    size_t i = entry_get(tt, task);
    tentry *e = &tt->e[i];
    /* The same weak reference as at its last visit: the same task (the reference is
     * alive and points to it). */
    if (e->wr && e->wr != key && weak_target(e->wr) != task) {
        /* A task at the address of one that has ended since its last visit. */
        retire(tt, e);
        entry_clear(sp, e);
        e->done = 0;
    }
    if (!e->wr) e->wr = Py_NewRef(key);
    tt->cycle_visits += e->cycle != tt->cycle;
    e->cycle = tt->cycle;
    e->fut = NULL;
    if (e->done) return;
    for (size_t k = 0; k < n_running; k++) {
        if (running[k].task == task) {
            retire(tt, e); /* its thread's sample shows it */
            return;
        }
    }
    PyObject *fut = task_attr(task, A_FUT_WAITER);
    if (fut && fut != Py_None) e->fut = fut; /* alive: the task holds it */
    Py_XDECREF(fut);
    if (!e->fut) {
        /* No future: ready to run, or done (for good). */
        PyObject *state = task_attr(task, A_STATE);
        e->done = state && PyUnicode_Check(state) && PyUnicode_Compare(state, s_pending) != 0;
        Py_XDECREF(state);
        PyErr_Clear();
        if (e->done) {
            retire(tt, e);
            return;
        }
    }
    if (e->fut && e->stack && e->fut_wr && weak_target(e->fut_wr) == e->fut) {
        /* It has not moved. A task is often awaited after its first sample (a task
         * created before the one that awaits it, which runs later): without a parent,
         * it is looked for at its next 8 ticks, then every 64th. */
        tstack *st = e->stack;
        if (!st->gt.parent_id && (++st->visits <= 8 || st->visits % 64 == 0))
            find_parent_again(tt, e);
        size_t *p = vec_push(&tt->seen);
        if (p) *p = i;
        return;
    }
    size_t *w = vec_push(&tt->walk);
    if (w) *w = i;
}

/* Visits up to max_tasks elements of the task set's table from the cursor. Waiting tasks
 * are scattered in memory and cold after 10 ms of the program's own work, so the visit
 * is done in stages over all of them, each prefetching what the next one reads (the
 * weak references, then the tasks and their entries, then the weak references to their
 * futures): their cache misses overlap instead of following each other. */
static void scan(SamplerObject *sp, task_table *tt, PySetObject *so, const running_task *running,
                 size_t n_running) {
    size_t slots = (size_t)so->mask + 1, pos = tt->cursor, wrap = SIZE_MAX;
    if (pos >= slots) {
        end_cycle(sp, tt); /* the set shrank under the cursor */
        pos = 0;
    }
    tt->slots.n = 0;
    if (vec_reserve(&tt->slots, sp->max_tasks < tt->live ? sp->max_tasks : tt->live)) return;
    for (size_t scanned = 0; scanned < slots && tt->slots.n < sp->max_tasks; scanned++) {
        setentry *se = &so->table[pos];
        if (se->key && se->hash != -1 && PyWeakref_CheckRef(se->key)) {
            tslotv *v = vec_push(&tt->slots); /* cannot fail: room was made */
            v->key = se->key;
            v->pos = pos;
            __builtin_prefetch((char *)se->key + sizeof(PyObject));
        }
        if (++pos == slots) {
            wrap = tt->slots.n; /* the cycle ends after the visit of those before */
            pos = 0;
        }
    }
    tt->cursor = pos;
    tt->visits = tt->slots.n;
    tslotv *v = tt->slots.items;
    size_t n = tt->slots.n, mask = tt->cap - 1;
    for (size_t k = 0; k < n; k++) {
        v[k].task = weak_target(v[k].key);
        if (!v[k].task) continue;
        for (int line = 0; line < 4; line++) __builtin_prefetch((char *)v[k].task + 64 * line);
        __builtin_prefetch(&tt->e[ptr_hash(v[k].task, mask)]);
    }
    for (size_t k = 0; k < n; k++) {
        if (!v[k].task) continue;
        for (size_t i = ptr_hash(v[k].task, mask); tt->e[i].task; i = (i + 1) & mask) {
            if (tt->e[i].task != v[k].task) continue;
            /* Its future and the weak reference to it, if it has not moved (reading
             * _fut_waiter takes a reference: a write to the future). */
            if (tt->e[i].fut_wr) __builtin_prefetch((char *)tt->e[i].fut_wr + sizeof(PyObject));
            if (tt->e[i].fut) __builtin_prefetch(tt->e[i].fut, 1);
            break;
        }
    }
    /* Reading a chain costs ~25 times a visit: at most a 40th of max_tasks a tick; the
     * tasks after the one that reached it are visited at the next tick. */
    size_t max_walks = sp->max_tasks / 40 ? sp->max_tasks / 40 : 1;
    for (size_t k = 0; k < n; k++) {
        if (tt->walk.n >= max_walks) {
            tt->cursor = v[k].pos;
            tt->visits = k;
            if (k == wrap) end_cycle(sp, tt); /* those before ended the table */
            return;
        }
        if (k == wrap) end_cycle(sp, tt);
        visit(sp, tt, v[k].key, v[k].task, running, n_running);
    }
    if (wrap == n) end_cycle(sp, tt);
}

/* Notes, after a pass that visited every live task of the set, what is_quiet compares. A
 * task changes only by running in its loop's thread, and a task is made (or ended) in
 * it too (or the set's size changes): while those threads' CPU clocks have not moved and
 * the set is the same size, every task is as this pass found it. */
static void note_quiet(task_table *tt, PySetObject *so) {
    tt->quiet.n = 0;
    tt->n_quiet_threads = 0;
    if (tt->visits < tt->live || vec_reserve(&tt->quiet, tt->seen.n)) return;
    for (size_t k = 0; k < tt->seen.n; k++) {
        const tstack *st = tt->e[AT(tt->seen, size_t, k)].stack;
        unsigned long tid = st->gt.native_id;
        size_t j = 0;
        while (j < tt->n_quiet_threads && tt->quiet_tid[j] != tid) j++;
        if (j < tt->n_quiet_threads) continue;
        int64_t cpu = thread_cpu_ns(tid);
        if (j == MAX_LOOPS || cpu < 0) return; /* no clock: never quiet */
        tt->quiet_tid[j] = tid;
        tt->quiet_cpu[j] = cpu;
        tt->n_quiet_threads++;
    }
    if (tt->seen.n) memcpy(tt->quiet.items, tt->seen.items, tt->seen.n * sizeof(size_t));
    tt->quiet.n = tt->seen.n;
    tt->quiet_live = (size_t)so->used;
    tt->quiet_fill = (size_t)so->fill;
}

/* Whether nothing can have changed since note_quiet: the same task set, no loop thread
 * has run. */
static int is_quiet(task_table *tt, PySetObject *so) {
    if (!tt->quiet.n || (size_t)so->used != tt->quiet_live || (size_t)so->fill != tt->quiet_fill ||
        vec_reserve(&tt->seen, tt->quiet.n))
        return 0;
    for (size_t j = 0; j < tt->n_quiet_threads; j++)
        if (thread_cpu_ns(tt->quiet_tid[j]) != tt->quiet_cpu[j]) return 0;
    return 1;
}

/* Gives the references of the stacks recorded since the last pass to this pass's. */
static void release_recorded(SamplerObject *sp, task_table *tt) {
    size_t n = 0;
    for (size_t k = 0; k < tt->recorded.n; k++) n += AT(tt->recorded, tstack *, k)->n_refs;
    if (vec_reserve(&sp->refs, n)) return; /* next time */
    for (size_t k = 0; k < tt->recorded.n; k++) {
        tstack *st = AT(tt->recorded, tstack *, k);
        if (st->n_refs)
            memcpy(&AT(sp->refs, PyObject *, sp->refs.n), st->refs, st->n_refs * sizeof(PyObject *));
        sp->refs.n += st->n_refs;
        free(st);
    }
    tt->recorded.n = 0;
}

void ppk_py_gather_tasks(SamplerObject *sp, PyObject *active, const running_task *running,
                         size_t n_running) {
    task_table *tt = sp->tasks;
    if (!tt) return;
    int64_t t0 = mono_ns();
    release_recorded(sp, tt);
    tt->seen.n = tt->walk.n = 0;
    tt->n_loops = 0;
    tt->visits = 0;
    find_descriptors();
    PyObject *set = task_set();
    PySetObject *so = (PySetObject *)set;
    tt->live = so ? (size_t)so->used : 0;
    size_t want = tt->live < sp->max_tasks ? tt->live : sp->max_tasks;
    int quiet = so && is_quiet(tt, so);
    if (quiet) {
        /* Nothing has run: the tasks sampled at the last pass, as they were. */
        memcpy(tt->seen.items, tt->quiet.items, tt->quiet.n * sizeof(size_t));
        tt->seen.n = tt->quiet.n;
        tt->visits = tt->live;
    } else if (!so || table_reserve(tt, want + 1)) {
        if (tt->used) end_cycle(sp, tt); /* no task set: every task has ended */
        tt->quiet.n = 0;
    } else {
        scan(sp, tt, so, running, n_running);
        /* Their stacks are compared with what is read (cold too). */
        for (size_t k = 0; k < tt->walk.n; k++) {
            const tentry *e = &tt->e[AT(tt->walk, size_t, k)];
            for (int line = 0; e->stack && line < 4; line++)
                __builtin_prefetch((char *)e->stack + 64 * line);
        }
        for (size_t k = 0; k < tt->walk.n; k++) walk_task(sp, tt, AT(tt->walk, size_t, k), active);
        sweep(sp, tt);
        note_quiet(tt, so);
    }
    Py_XDECREF(set);
    int64_t t1 = mono_ns();
    pthread_mutex_lock(&sp->lock);
    sp->st.task_ticks_quiet += quiet;
    sp->st.tasks_seen += tt->seen.n;
    sp->st.tasks_walked += tt->walk.n;
    sp->st.tasks_skipped += tt->live > tt->visits ? tt->live - tt->visits : 0;
    sp->st.task_ns_total += (uint64_t)(t1 - t0);
    pthread_mutex_unlock(&sp->lock);
}

/* ---- Recording, without the GIL ---------------------------------------------------- */

static void record_stack(SamplerObject *sp, tstack *st, int64_t wall, uint64_t count,
                         rec_counts *c) {
    st->gt.wall_ns = wall;
    ppk_py_record(sp, sp->builder, &sp->tick.fixups, &st->gt, st->frames, st->labels, 0,
                  (int64_t)count, c);
    c->task_samples++;
}

static void record_retired(SamplerObject *sp, task_table *tt, rec_counts *c) {
    for (size_t k = 0; k < tt->retired.n; k++) {
        retired *r = &AT(tt->retired, retired, k);
        if (r->count) record_stack(sp, r->st, r->wall, r->count, c);
        tstack **p = vec_push(&tt->recorded);
        if (p) *p = r->st; /* (else lost: a leak, not a crash) */
    }
    tt->retired.n = 0;
}

void ppk_py_record_tasks(SamplerObject *sp, int64_t now, rec_counts *c) {
    task_table *tt = sp->tasks;
    if (!tt) return;
    record_retired(sp, tt, c);
    /* A task sampled for the first time (or again after it ran) gets the interval since
     * the previous tick, as a new thread does: when the ticks rotate through more tasks
     * than they visit, one found late loses the time before (never more than a turn). */
    int64_t step = now - sp->prev_tick_ns;
    for (size_t k = 0; k < tt->seen.n; k++) {
        tentry *e = &tt->e[AT(tt->seen, size_t, k)];
        int64_t wall = e->last_ns ? now - e->last_ns : step;
        e->last_ns = now;
        e->acc_wall += wall > 0 ? wall : 0;
        e->acc_count++;
        if (e->acc_wall < (int64_t)sp->coalesce * sp->period_ns) continue;
        record_stack(sp, e->stack, e->acc_wall, e->acc_count, c);
        e->acc_wall = 0;
        e->acc_count = 0;
    }
    tt->seen.n = 0;
}

void ppk_py_flush_tasks(SamplerObject *sp, rec_counts *c) {
    task_table *tt = sp->tasks;
    if (!tt) return;
    record_retired(sp, tt, c);
    for (size_t i = 0; i < tt->cap; i++) {
        tentry *e = &tt->e[i];
        if (!e->task || e->task == TOMB || !e->stack || !e->acc_count) continue;
        record_stack(sp, e->stack, e->acc_wall, e->acc_count, c);
        e->acc_wall = 0;
        e->acc_count = 0;
    }
}

/* ---- Release ----------------------------------------------------------------------- */

static void free_stack(tstack *st) {
    for (size_t i = 0; i < st->n_refs; i++) Py_DECREF(st->refs[i]);
    free(st);
}

void ppk_py_free_tasks(SamplerObject *sp) {
    task_table *tt = sp->tasks;
    if (!tt) return;
    sp->tasks = NULL; /* first: a finalizer run by a release finds nothing */
    for (size_t i = 0; i < tt->cap; i++) {
        tentry *e = &tt->e[i];
        if (!e->task || e->task == TOMB) continue;
        if (e->stack) free_stack(e->stack);
        Py_XDECREF(e->wr);
        Py_XDECREF(e->fut_wr);
    }
    for (size_t k = 0; k < tt->retired.n; k++) free_stack(AT(tt->retired, retired, k).st);
    for (size_t k = 0; k < tt->recorded.n; k++) free_stack(AT(tt->recorded, tstack *, k));
    free(tt->e);
    vec_free(&tt->slots);
    vec_free(&tt->quiet);
    vec_free(&tt->seen);
    vec_free(&tt->walk);
    vec_free(&tt->retired);
    vec_free(&tt->recorded);
    vec_free(&tt->frames);
    vec_free(&tt->labels);
    free(tt);
}
