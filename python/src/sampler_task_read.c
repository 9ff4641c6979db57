/*
 * sampler_task_read.c - reading an asyncio task with the GIL, for the Sampler's tasks
 * that wait (sampler_tasks.c explains the whole): asyncio's types and the C getters of
 * their attributes, a task's coroutine chain, its parent task, and the stack a task
 * shows (its frames and labels, with the references that keep their strings alive).
 *
 * Nothing here runs Python code: a task's attributes are read through the getset
 * descriptors of _asyncio's C Future and Task types (C getters) when its type's
 * attribute is that descriptor, else as plain instance attributes (the pure-Python
 * Task); a chain's links through the getsets of the exact coroutine, generator and async
 * generator types (cr_await, gi_yieldfrom, ag_await) and from an async generator's
 * asend() object to its generator (`async for`), each link's frame from the object
 * itself (internals.c).
 */
#include "sampler_tasks.h"

static const char *const attr_text[N_ATTRS] = {"_coro", "_fut_waiter", "_loop", "_state",
                                               "_callbacks"};
/* Interned names. */
static PyObject *attr_name[N_ATTRS];
/* _asyncio.Task's and _asyncio.Future's getset descriptors of those names (each type has
 * its own), found once _asyncio is imported. */
static PyObject *c_descr[2][N_ATTRS];
/* _asyncio.Task and Future, asyncio's pure-Python Task and Future; functools.partial. */
static PyTypeObject *c_task_type, *c_future_type, *py_task_type, *py_future_type, *partial_type;
static PyObject *s_asyncio_tasks, *s_task_set, *s_data, *s_thread_id, *s_name, *s_parent_task,
    *s__asyncio, *s_Task, *s_Future, *s_PyTask, *s_PyFuture, *s_asyncio_futures, *s_cr_await,
    *s_gi_yieldfrom, *s_ag_await, *s_pending, *s_functools, *s_partial, *s_args;
static int descr_ready; /* the types and descriptors were looked up */

/* The "task state" label: waiting on a future, or ready to run (scheduled). */
static const ppk_str S_WAITING = PPK_STR("waiting"), S_READY = PPK_STR("ready");

/* The frames kept of a chain (of a deeper one, the innermost), and the links followed
 * at most. */
#define MAX_TASK_FRAMES 256
#define MAX_CHAIN_LINKS 4096

/* ---- asyncio's objects ----------------------------------------------------------- */

int ppk_py_asyncio_names(void) {
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
    s_cr_await = PyUnicode_InternFromString("cr_await");
    s_gi_yieldfrom = PyUnicode_InternFromString("gi_yieldfrom");
    s_ag_await = PyUnicode_InternFromString("ag_await");
    s_functools = PyUnicode_InternFromString("functools");
    s_partial = PyUnicode_InternFromString("partial");
    s_args = PyUnicode_InternFromString("args");
    s_pending = PyUnicode_InternFromString("PENDING");
    if (!s_asyncio_tasks || !s_task_set || !s_thread_id || !s_name || !s_parent_task ||
        !s__asyncio || !s_Task || !s_Future || !s_PyTask || !s_PyFuture ||
        !s_asyncio_futures || !s_cr_await || !s_gi_yieldfrom || !s_ag_await || !s_pending ||
        !s_functools || !s_partial || !s_args)
        return -1;
    s_data = PyUnicode_InternFromString("data"); /* last: marks the set-up done */
    return s_data ? 0 : -1;
}

/* A type of a module (a new reference), or NULL. */
static PyTypeObject *module_type(PyObject *mod, PyObject *name) {
    PyObject *t = ppk_py_module_attr(mod, name);
    return t && PyType_Check(t) ? (PyTypeObject *)Py_NewRef(t) : NULL;
}

/* asyncio's types and _asyncio.Task's descriptors, once asyncio is imported (with the
 * GIL). */
void ppk_py_asyncio_find(void) {
    if (descr_ready) return;
    PyObject *type = ppk_py_module_attr(s__asyncio, s_Task);
    if (!type || !PyType_Check(type) || !ppk_py_module_attr(s_asyncio_tasks, s_PyTask)) return;
    c_task_type = module_type(s__asyncio, s_Task);
    c_future_type = module_type(s__asyncio, s_Future);
    py_task_type = module_type(s_asyncio_tasks, s_PyTask);
    py_future_type = module_type(s_asyncio_futures, s_PyFuture);
    partial_type = module_type(s_functools, s_partial); /* asyncio imports functools */
    for (int k = 0; k < 2; k++) {
        PyTypeObject *t = k ? c_future_type : c_task_type;
        for (int i = 0; t && i < N_ATTRS; i++) {
            PyObject *d = _PyType_Lookup(t, attr_name[i]);
            if (d && Py_IS_TYPE(d, &PyGetSetDescr_Type)) c_descr[k][i] = Py_NewRef(d);
        }
    }
    descr_ready = 1;
}

int ppk_py_is_task(PyObject *o) {
    return (c_task_type && PyObject_TypeCheck(o, c_task_type)) ||
           (py_task_type && PyObject_TypeCheck(o, py_task_type));
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
PyObject *ppk_py_task_attr(PyObject *obj, int which) {
    PyTypeObject *t = Py_TYPE(obj);
    if (getter_cache[which].type == t && t->tp_version_tag == getter_cache[which].version &&
        t->tp_version_tag) {
        PyObject *v = getter_cache[which].get(obj, getter_cache[which].closure);
        if (!v) PyErr_Clear();
        return v;
    }
    PyObject *d = _PyType_Lookup(t, attr_name[which]);
    if (d && (d == c_descr[0][which] || d == c_descr[1][which]) && ppk_py_generic_first(t)) {
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
PyObject *ppk_py_weak_target(PyObject *wr) {
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
PyObject *ppk_py_task_set(void) {
    PyObject *ws = ppk_py_module_attr(s_asyncio_tasks, s_task_set);
    PyObject *data = ws ? ppk_py_safe_getattr(ws, s_data) : NULL;
    if (data && !PySet_Check(data)) Py_CLEAR(data);
    return data;
}

int ppk_py_task_done(PyObject *task) {
    PyObject *state = ppk_py_task_attr(task, A_STATE);
    int done = state && PyUnicode_Check(state) && PyUnicode_Compare(state, s_pending) != 0;
    Py_XDECREF(state);
    PyErr_Clear();
    return done;
}

/* ---- Reading a task ---------------------------------------------------------------- */

/* The loop met i-th in this pass. */
static loopinfo *loop_at(const task_table *tt, size_t i) {
    return &tt->loop_blocks[i / LOOP_BLOCK][i % LOOP_BLOCK];
}

/* Room for one more loop in tt: a block, and an index at most half full. -1: no memory. */
static int loops_reserve(task_table *tt) {
    size_t n = tt->n_loops + 1;
    if (n > tt->n_loop_blocks * LOOP_BLOCK) {
        loopinfo **blocks = realloc(tt->loop_blocks, (tt->n_loop_blocks + 1) * sizeof *blocks);
        if (!blocks) return -1;
        tt->loop_blocks = blocks;
        if (!(blocks[tt->n_loop_blocks] = malloc(LOOP_BLOCK * sizeof(loopinfo)))) return -1;
        tt->n_loop_blocks++;
    }
    if (n * 2 <= tt->loop_index_cap) return 0;
    size_t cap = tt->loop_index_cap ? tt->loop_index_cap * 2 : 16;
    uint32_t *index = calloc(cap, sizeof *index);
    if (!index) return -1;
    for (size_t i = 0; i < tt->n_loops; i++) {
        size_t j = ppk_py_ptr_hash(loop_at(tt, i)->loop, cap - 1);
        while (index[j]) j = (j + 1) & (cap - 1);
        index[j] = (uint32_t)i + 1;
    }
    free(tt->loop_index);
    tt->loop_index = index;
    tt->loop_index_cap = cap;
    return 0;
}

void ppk_py_loops_clear(task_table *tt) {
    if (tt->n_loops) memset(tt->loop_index, 0, tt->loop_index_cap * sizeof *tt->loop_index);
    tt->n_loops = 0;
}

void ppk_py_loops_free(task_table *tt) {
    for (size_t i = 0; i < tt->n_loop_blocks; i++) free(tt->loop_blocks[i]);
    free(tt->loop_blocks);
    free(tt->loop_index);
}

/* The index slot of `loop`: the one naming it, or the empty one it would take. */
static uint32_t *loop_slot(const task_table *tt, PyObject *loop) {
    size_t mask = tt->loop_index_cap - 1, j = ppk_py_ptr_hash(loop, mask);
    while (tt->loop_index[j] && loop_at(tt, tt->loop_index[j] - 1)->loop != loop)
        j = (j + 1) & mask;
    return &tt->loop_index[j];
}

unsigned long ppk_py_loop_thread(PyObject *loop) {
    PyObject *tid = ppk_py_safe_getattr(loop, s_thread_id);
    unsigned long ident = tid && PyLong_Check(tid) ? PyLong_AsUnsignedLong(tid) : 0;
    if (PyErr_Occurred()) {
        PyErr_Clear();
        ident = 0;
    }
    Py_XDECREF(tid);
    return ident;
}

/* The thread running `loop` (NULL: it is not running: no _thread_id, or no thread of
 * that ident, as in a child forked while another thread ran the loop). */
static loopinfo *loop_of(SamplerObject *sp, task_table *tt, PyObject *loop, threads_dict *active) {
    uint32_t *slot = tt->loop_index_cap ? loop_slot(tt, loop) : NULL;
    if (slot && *slot) {
        loopinfo *li = loop_at(tt, *slot - 1);
        return li->ident ? li : NULL;
    }
    if (loops_reserve(tt)) return NULL; /* its tasks are not sampled this pass */
    *loop_slot(tt, loop) = (uint32_t)tt->n_loops + 1;
    loopinfo *li = loop_at(tt, tt->n_loops++);
    *li = (loopinfo){loop, ppk_py_loop_thread(loop), 0, NULL, ppk_py_hook_covers(loop), 0};
    if (!li->ident) return NULL;
    int found = 0;
    for (PyThreadState *t = PyInterpreterState_ThreadHead(sp->interp); t;
         t = PyThreadState_Next(t))
        if (t->thread_id == li->ident) {
            li->native_id = t->native_thread_id;
            found = 1;
        }
    if (!found) {
        li->ident = 0;
        return NULL;
    }
    /* Its thread's name: that of the thread's sample at this pass (it has frames: it
     * runs the loop), or else threading's (an int made for the lookup in
     * threading._active, the lookup, the attribute: a few microseconds when they are
     * cold, as they are at every pass). */
    const gbuf *b = tt->threads;
    for (size_t k = 0; b && k < b->threads.n; k++) {
        const gthread *g = &AT(b->threads, gthread, k);
        if (g->ident == li->ident && g->name_obj) {
            li->name = g->name_obj; /* (a reference kept until the next pass) */
            return li;
        }
    }
    PyObject *ident = PyLong_FromUnsignedLong(li->ident);
    PyObject *thread = ppk_py_thread_of(active, ident);
    Py_XDECREF(ident);
    PyObject *name = thread ? ppk_py_safe_getattr(thread, s_name) : NULL;
    if (name && !ppk_py_keep_ref(sp, name)) li->name = name;
    return li;
}

loopinfo *ppk_py_task_loop(SamplerObject *sp, task_table *tt, PyObject *task,
                           threads_dict *active) {
    PyObject *loop = ppk_py_task_attr(task, A_LOOP);
    loopinfo *li = loop ? loop_of(sp, tt, loop, active) : NULL;
    Py_XDECREF(loop); /* the task holds it */
    return li;
}

/* Reverses frames [i, j) of v. */
static void reverse(gframe *v, size_t i, size_t j) {
    for (; i + 1 < j; i++, j--) {
        gframe t = v[i];
        v[i] = v[j - 1];
        v[j - 1] = t;
    }
}

/* The frames of a coroutine chain into tt->frames, leaf first: the MAX_TASK_FRAMES
 * innermost. */
static void read_chain(SamplerObject *sp, task_table *tt, PyObject *coro) {
    tt->frames.n = 0;
    size_t read = 0; /* frames read: past MAX_TASK_FRAMES, each replaces the outermost */
    PyObject *o = Py_XNewRef(coro);
    for (int links = 0; o && links < MAX_CHAIN_LINKS; links++) {
        /* `async for` awaits the generator's asend(): the generator is the next link. */
        PyObject *agen = ppk_py_asend_gen(o);
        if (agen) Py_SETREF(o, Py_NewRef(agen));
        PyObject *aname;
        if (PyCoro_CheckExact(o))
            aname = s_cr_await;
        else if (PyGen_CheckExact(o))
            aname = s_gi_yieldfrom;
        else if (PyAsyncGen_CheckExact(o))
            aname = s_ag_await;
        else
            break; /* a future's iterator, another awaitable: the end */
        /* Its frame, read from the object: cr_frame would make a frame object for each
         * coroutine read (an allocation the program keeps until the coroutine ends). */
        ppk_py_frame_ref ref;
        int ok = 1;
        if (ppk_py_gen_frame(o, &ref)) {
            /* The frames are a ring once full: the outermost goes, in place. */
            gframe *g = tt->frames.n < MAX_TASK_FRAMES
                            ? vec_push(&tt->frames)
                            : &AT(tt->frames, gframe, read % MAX_TASK_FRAMES);
            ok = g && !ppk_py_code_frame(sp, ref.code, ref.lasti, g);
            if (ok)
                read++;
            else if (g && read < MAX_TASK_FRAMES)
                tt->frames.n--;
        }
        PyObject *next = ok ? PyObject_GetAttr(o, aname) : NULL;
        if (!next) PyErr_Clear();
        Py_DECREF(o);
        o = next;
    }
    Py_XDECREF(o);
    /* Leaf first: the ring's order reversed, from its newest frame (before the
     * outermost kept, at read % MAX_TASK_FRAMES once it wrapped) back. */
    size_t k = read > MAX_TASK_FRAMES ? read % MAX_TASK_FRAMES : 0;
    reverse(tt->frames.items, 0, k);
    reverse(tt->frames.items, k, tt->frames.n);
}

void ppk_py_prefetch_chain(PyObject *task, int awaited) {
    PyObject *coro = ppk_py_task_attr(task, A_CORO), *o = coro;
    if (coro && awaited) {
        o = PyCoro_CheckExact(coro) ? PyObject_GetAttr(coro, s_cr_await) : NULL;
        if (!o) PyErr_Clear();
        Py_DECREF(coro);
    }
    /* (The reference taken is a write to its first line.) */
    for (int line = 1; o && line < 4; line++) __builtin_prefetch((char *)o + 64 * line);
    Py_XDECREF(o);
}

/* Whether o is an asyncio task (C or pure Python). */
static int is_task(PyObject *o) {
    return o && ppk_py_is_task(o);
}

int ppk_py_is_future(PyObject *o) {
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

/* The first task that match() finds among the done callbacks of future `fut` (each a
 * (function, context) pair), or NULL. */
static PyObject *in_callbacks(PyObject *fut, PyObject *(*match)(PyObject *fn)) {
    PyObject *p = NULL, *cbs = ppk_py_task_attr(fut, A_CALLBACKS);
    for (Py_ssize_t i = 0; !p && cbs && PyList_Check(cbs) && i < PyList_GET_SIZE(cbs); i++) {
        PyObject *fn = PyList_GET_ITEM(cbs, i);
        p = match(PyTuple_Check(fn) && PyTuple_GET_SIZE(fn) ? PyTuple_GET_ITEM(fn, 0) : fn);
    }
    Py_XDECREF(cbs);
    return p; /* alive: fut's callbacks (or what they hold) hold it */
}

/* The first task that wakes up when one of the futures in tuple t (borrowed) is done, or
 * NULL. */
static PyObject *woken_by_futures(PyObject *t) {
    PyObject *p = NULL;
    for (Py_ssize_t j = 0; !p && t && PyTuple_Check(t) && j < PyTuple_GET_SIZE(t); j++) {
        PyObject *v = PyTuple_GET_ITEM(t, j);
        if (ppk_py_is_future(v) && !is_task(v)) p = in_callbacks(v, woken_by);
    }
    return p;
}

/* The task that awaits the owner of done callback fn. */
static PyObject *awaiter_by(PyObject *fn) {
    PyObject *p = woken_by(fn); /* await task */
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
            if (ppk_py_is_future(v) && !is_task(v)) p = in_callbacks(v, woken_by);
        }
    } else if (!p && partial_type && Py_IS_TYPE(fn, partial_type)) {
        /* functools.partial over that future: 3.11's wait_for (_release_waiter, waiter).
         * The exact C type: its `args` is a member, read by C code alone. */
        PyObject *args = PyObject_GetAttr(fn, s_args);
        if (!args) PyErr_Clear();
        p = woken_by_futures(args);
        Py_XDECREF(args); /* the partial holds it */
    }
    return p;
}

/* The task awaiting `task` (borrowed), or NULL. The file's opening comment says how it
 * is found. */
static PyObject *parent_of(PyObject *task) {
    PyObject *p = in_callbacks(task, awaiter_by);
    return p != task ? p : NULL;
}

/* Whether two names (str or NULL) are equal. */
static int same_str(PyObject *a, PyObject *b) {
    return a == b || (a && b && PyUnicode_Check(a) && PyUnicode_Check(b) &&
                      PyUnicode_Compare(a, b) == 0);
}

/* Whether stack st shows the frames of tt->frames, and the same name, tags, thread (and
 * its name) and parent (and its name). */
static int same_stack(const tstack *st, const task_table *tt, PyObject *name, PyObject *tags,
                      const loopinfo *li, PyObject *parent, PyObject *parent_name,
                      ppk_str state) {
    if (st->gt.n_frames != tt->frames.n || !same_str(st->name, name) || st->tags != tags ||
        !same_str(st->thread_name, li->name) ||
        st->gt.task_state.ptr != state.ptr ||
        st->gt.ident != li->ident ||
        st->gt.parent_id != (int64_t)(uintptr_t)parent ||
        !same_str(st->parent_name, parent_name))
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
                         const loopinfo *li, PyObject *parent, PyObject *parent_name,
                         ppk_str state) {
    tt->labels.n = 0;
    size_t nl = tags ? ppk_py_tag_labels(tags, &tt->labels) : 0;
    size_t nf = tt->frames.n, nr = nf + 7; /* codes, tags, 3 names and their bytes */
    void *mem = NULL;
    if (posix_memalign(&mem, 64, sizeof(tstack) + nf * sizeof(gframe) + nl * sizeof(glabel) +
                                     nr * sizeof(PyObject *)))
        return NULL;
    tstack *st = mem;
    memset(&st->gt, 0, sizeof st->gt);
    st->frames = (gframe *)(st + 1);
    st->labels = (glabel *)(st->frames + nf);
    st->refs = (PyObject **)(st->labels + nl);
    st->n_refs = 0;
    st->name = name;
    st->tags = tags;
    st->thread_name = li->name;
    st->parent_name = parent ? parent_name : NULL;
    st->visits = st->acc_tick = 0;
    st->acc_wall = 0;
    st->acc_count = 0;
    memcpy(st->frames, tt->frames.items, nf * sizeof(gframe));
    if (nl) memcpy(st->labels, tt->labels.items, nl * sizeof(glabel));
    for (size_t i = 0; i < nf; i++) take(st, (PyObject *)st->frames[i].code);
    take(st, tags);
    gthread *gt = &st->gt;
    gt->n_frames = nf;
    gt->n_labels = nl;
    gt->ident = li->ident;
    gt->native_id = li->native_id;
    PyObject *bytes;
    if (li->name) {
        gt->name = ppk_py_utf8_repair(li->name, tt->max_string_len, &bytes);
        take(st, li->name);
        take(st, bytes);
        Py_XDECREF(bytes);
    }
    gt->task_id = (int64_t)(uintptr_t)task;
    gt->task_state = state;
    if (name) {
        gt->task_name = ppk_py_utf8_repair(name, tt->max_string_len, &bytes);
        take(st, name);
        take(st, bytes);
        Py_XDECREF(bytes);
    }
    if (parent) {
        gt->parent_id = (int64_t)(uintptr_t)parent;
        if (parent_name) {
            gt->parent_name = ppk_py_utf8_repair(parent_name, tt->max_string_len, &bytes);
            take(st, parent_name);
            take(st, bytes);
            Py_XDECREF(bytes);
        }
    }
    return st;
}

/* A stack for entry e's task with the parent it has now, if it has one. */
void ppk_py_find_parent_again(task_table *tt, tentry *e) {
    tstack *old = e->stack;
    PyObject *parent = parent_of(e->task);
    if (!parent) return;
    tt->frames.n = 0;
    if (vec_reserve(&tt->frames, old->gt.n_frames)) return;
    memcpy(tt->frames.items, old->frames, old->gt.n_frames * sizeof(gframe));
    tt->frames.n = old->gt.n_frames;
    loopinfo li = {NULL, old->gt.ident, old->gt.native_id, old->thread_name, 0, 0};
    PyObject *parent_name = ppk_py_task_name(parent);
    tstack *st = new_stack(tt, e->task, old->name, old->tags, &li, parent, parent_name,
                           old->gt.task_state);
    Py_XDECREF(parent_name); /* the stack holds it */
    if (st) ppk_py_replace_stack(tt, e, st);
}

/* Takes a weak reference to the future entry e waits on, for the next passes' check. */
static void note_future(SamplerObject *sp, tentry *e) {
    if (e->fut_wr) ppk_py_keep_ref(sp, e->fut_wr);
    e->fut_wr = e->fut ? PyWeakref_NewRef(e->fut, NULL) : NULL;
    if (!e->fut_wr) PyErr_Clear(); /* not weakly referenceable: read at every tick */
}

void ppk_py_walk_task(SamplerObject *sp, task_table *tt, const twalk *w) {
    size_t i = w->entry;
    tentry *e = &tt->e[i];
    PyObject *task = e->task;
    const loopinfo *li = w->li;
    PyObject *coro = ppk_py_task_attr(task, A_CORO);
    read_chain(sp, tt, coro);
    Py_XDECREF(coro);
    if (!tt->frames.n) {
        ppk_py_retire(tt, e);
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
    PyObject *parent_name = parent ? ppk_py_task_name(parent) : NULL;
    /* A name that could not be read now (a signal pending: ppk_py_task_name) is taken
     * to be unchanged: the stack would be made again without it, then again with it. */
    tstack *old = e->stack;
    if (!name && old) name = Py_XNewRef(old->name);
    if (!parent_name && parent && old && old->gt.parent_id == (int64_t)(uintptr_t)parent)
        parent_name = Py_XNewRef(old->parent_name);
    ppk_str state = e->fut ? S_WAITING : S_READY;
    int same = old && same_stack(old, tt, name, tags, li, parent, parent_name, state);
    tstack *st = same ? NULL : new_stack(tt, task, name, tags, li, parent, parent_name, state);
    Py_XDECREF(name); /* the stack holds them */
    Py_XDECREF(parent_name);
    if (!same) {
        if (!st) return;
        ppk_py_replace_stack(tt, e, st);
    }
    note_future(sp, e);
    ppk_py_task_seen(tt, i);
    if (e->fut && is_task(e->fut)) ppk_py_task_awaited(tt, e->fut); /* (`await task`) */
}

