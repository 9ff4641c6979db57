/*
 * sampler_task_hook.c - which asyncio tasks may have moved since the last pass, told by
 * their event loop (sampler_tasks.c explains how the passes use it).
 *
 * A task moves only by running a step, and asyncio schedules each step through its
 * loop's call_soon: the first (Task.__init__ calls loop.call_soon(step)), and every
 * later one (a future, once done, schedules its callbacks, the task's wakeup among
 * them, with loop.call_soon; a bare yield schedules the next step). _asyncio's C tasks
 * and futures look call_soon up on the loop as a method, the pure-Python ones call
 * self._loop.call_soon. So, while a sampler samples tasks, BaseEventLoop.call_soon is a
 * C callable (a method descriptor, like the function it replaces) that notes the task
 * of a callback that is one of a task's steps or its wakeup (a TaskStepMethWrapper, or
 * a C function or method bound to a task), then calls the replaced function with the
 * same arguments. Nothing else changes for the program: a type check or two and a
 * probe of a small table a call_soon, and one reference to the task until the
 * sampler's next pass. A loop whose class or instance
 * has a call_soon of its own (uvloop, a subclass that overrides it) is not covered; its
 * tasks are found by scanning, as without the hook.
 *
 * One step is not scheduled: on 3.12 and later, a task made by an eager task factory
 * runs its first step as it is made. BaseEventLoop.create_task (which asyncio.create_task,
 * TaskGroup.create_task and ensure_future call) is then wrapped the same way, and notes
 * the task it returns if it is not done: a task that waits after its first step is read
 * at the next pass, not when a pass's scan comes to it (with many tasks, seconds later,
 * its time until then lost).
 *
 * The marks are strong references (a task noted may end before the pass), each task
 * once a batch, at most MARKS_CAP a batch; more is an overflow, which the pass answers
 * by scanning. Everything here is under the GIL: the hook runs in the loops' threads,
 * the batch is taken by the sampler's pass or its main-thread callback.
 */
#include "sampler_tasks.h"

/* _asyncio's TaskStepMethWrapper (3.11 to 3.13): the task and the step's argument. */
typedef struct stepwrap {
    PyObject_HEAD
    PyObject *task;
    PyObject *arg;
} stepwrap;

/* A method of BaseEventLoop replaced by a wrapper that notes tasks. */
typedef struct HookObject {
    PyObject_HEAD
    PyObject *orig; /* the function it replaced */
    vectorcallfunc vectorcall;
} HookObject;

static struct {
    SamplerObject *owner;   /* the sampler taking the marks, or NULL: none noted */
    PyObject **task;        /* the batch (strong references) */
    size_t n;
    PyObject **set;         /* 2 * MARKS_CAP slots: the batch's tasks, by address */
    int overflow;
    PyTypeObject *step_type; /* TaskStepMethWrapper, once met */
} marks;

/* The wrapped methods: call_soon notes the task a callback steps, create_task the task
 * it made (3.12 and later). */
enum { H_CALL_SOON, H_CREATE_TASK, N_HOOKS };
static HookObject *hook[N_HOOKS];  /* installed in hooked_class, or NULL */
static PyTypeObject *hooked_class; /* held while one is */
static PyObject *s_name[N_HOOKS], *s_base_events, *s_BaseEventLoop;

#define SET_MASK (2 * MARKS_CAP - 1)

/* _asyncio's TaskStepMethWrapper: a static type on 3.11, a heap type of the module
 * ("_asyncio.TaskStepMethWrapper") on 3.12 and 3.13. */
static int is_step_type(PyTypeObject *t) {
    const char *dot = strrchr(t->tp_name, '.');
    return !strcmp(dot ? dot + 1 : t->tp_name, "TaskStepMethWrapper") &&
           t->tp_basicsize == sizeof(stepwrap);
}

static void note_task(PyObject *task);

static void note(PyObject *cb) {
    PyTypeObject *t = Py_TYPE(cb);
    PyObject *task;
    if (t == marks.step_type) {
        task = ((stepwrap *)cb)->task;
    } else if (PyCFunction_Check(cb)) {
        task = PyCFunction_GET_SELF(cb);
    } else if (PyMethod_Check(cb)) {
        task = PyMethod_GET_SELF(cb);
    } else if (!marks.step_type && !PyFunction_Check(cb) && is_step_type(t)) {
        marks.step_type = t;
        task = ((stepwrap *)cb)->task;
    } else {
        return;
    }
    if (task && ppk_py_is_task(task)) note_task(task);
}

static void note_task(PyObject *task) {
    size_t i = ppk_py_ptr_hash(task, SET_MASK);
    for (; marks.set[i]; i = (i + 1) & SET_MASK)
        if (marks.set[i] == task) return;
    if (marks.n == MARKS_CAP) {
        marks.overflow = 1;
        return;
    }
    marks.set[i] = task;
    marks.task[marks.n++] = Py_NewRef(task);
}

static PyObject *call_orig(PyObject *self, PyObject *const *args, size_t nargsf,
                           PyObject *kwnames) {
    PyObject *orig = ((HookObject *)self)->orig;
    if (!orig) {
        PyErr_SetString(PyExc_RuntimeError, "pprofkit's loop hook: cleared");
        return NULL;
    }
    return PyObject_Vectorcall(orig, args, nargsf, kwnames);
}

static PyObject *call_soon_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                      PyObject *kwnames) {
    /* (loop, callback, *args): as a method, the loop comes first. */
    if (marks.owner && PyVectorcall_NARGS(nargsf) >= 2) note(args[1]);
    return call_orig(self, args, nargsf, kwnames);
}

#if PY_VERSION_HEX >= 0x030C0000
static PyObject *create_task_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,
                                        PyObject *kwnames) {
    PyObject *task = call_orig(self, args, nargsf, kwnames);
    if (task && marks.owner && ppk_py_is_task(task) && !ppk_py_task_done(task)) note_task(task);
    return task;
}
#endif

/* Bound to an instance as the function was (a caller that gets the attribute rather
 * than the method: 3.11's _asyncio with a context). */
static PyObject *hook_get(PyObject *self, PyObject *obj, PyObject *type) {
    (void)type;
    return obj && obj != Py_None ? PyMethod_New(self, obj) : Py_NewRef(self);
}

static int hook_traverse(HookObject *h, visitproc visit, void *arg) {
    Py_VISIT(h->orig);
    return 0;
}

static int hook_clear(HookObject *h) {
    Py_CLEAR(h->orig);
    return 0;
}

static void hook_dealloc(HookObject *h) {
    PyObject_GC_UnTrack(h);
    hook_clear(h);
    Py_TYPE(h)->tp_free((PyObject *)h);
}

static PyObject *hook_wrapped(HookObject *h, void *unused) {
    (void)unused;
    return Py_NewRef(h->orig ? h->orig : Py_None);
}

static PyGetSetDef hook_getset[] = {
    {"__wrapped__", (getter)hook_wrapped, NULL, "the method it calls", NULL},
    {NULL}};

static PyTypeObject HookType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pprofkit._native.LoopHook",
    .tp_doc = "A method of BaseEventLoop while pprofkit samples asyncio tasks: call_soon "
              "notes the task a callback steps or wakes up, create_task the task it made; "
              "each calls __wrapped__ with the same arguments.",
    .tp_basicsize = sizeof(HookObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(HookObject, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = hook_get,
    .tp_traverse = (traverseproc)hook_traverse,
    .tp_clear = (inquiry)hook_clear,
    .tp_dealloc = (destructor)hook_dealloc,
    .tp_getset = hook_getset,
};

int ppk_py_hook_claim(SamplerObject *sp) {
    if (marks.owner) return -1;
    if (!s_BaseEventLoop) {
        s_name[H_CALL_SOON] = PyUnicode_InternFromString("call_soon");
        s_name[H_CREATE_TASK] = PyUnicode_InternFromString("create_task");
        s_base_events = PyUnicode_InternFromString("asyncio.base_events");
        s_BaseEventLoop = PyUnicode_InternFromString("BaseEventLoop");
        if (!s_name[H_CALL_SOON] || !s_name[H_CREATE_TASK] || !s_base_events ||
            !s_BaseEventLoop || PyType_Ready(&HookType)) {
            PyErr_Clear();
            Py_CLEAR(s_BaseEventLoop);
            return -1;
        }
    }
    if (!marks.task) {
        marks.task = malloc(MARKS_CAP * sizeof *marks.task);
        marks.set = calloc(2 * MARKS_CAP, sizeof *marks.set);
        if (!marks.task || !marks.set) {
            free(marks.task);
            free(marks.set);
            marks.task = marks.set = NULL;
            return -1;
        }
    }
    marks.owner = sp;
    return 0;
}

/* Replaces method `which` of cls (a function) by its hook. 0: done. */
static int install(PyObject *cls, int which, vectorcallfunc call) {
    PyObject *orig = _PyType_Lookup((PyTypeObject *)cls, s_name[which]);
    if (!orig || !PyFunction_Check(orig)) return -1;
    HookObject *h = PyObject_GC_New(HookObject, &HookType);
    if (!h) {
        PyErr_Clear();
        return -1;
    }
    h->orig = Py_NewRef(orig);
    h->vectorcall = call;
    PyObject_GC_Track(h);
    if (PyObject_SetAttr(cls, s_name[which], (PyObject *)h)) {
        PyErr_Clear();
        Py_DECREF(h);
        return -1;
    }
    hook[which] = h;
    return 0;
}

int ppk_py_hook_install(SamplerObject *sp) {
    if (marks.owner != sp || hook[H_CALL_SOON]) return 0;
    PyObject *cls = ppk_py_module_attr(s_base_events, s_BaseEventLoop);
    /* A plain class (no metaclass of its own: setting the attribute runs no Python
     * code) whose methods are functions. */
    if (!cls || !PyType_Check(cls) || !Py_IS_TYPE(cls, &PyType_Type) ||
        install(cls, H_CALL_SOON, call_soon_vectorcall))
        return 0;
    hooked_class = (PyTypeObject *)Py_NewRef(cls);
#if PY_VERSION_HEX >= 0x030C0000 /* eager task factories */
    install(cls, H_CREATE_TASK, create_task_vectorcall); /* (without: found by scans) */
#endif
    return 1;
}

int ppk_py_hook_covers(PyObject *loop) {
    PyTypeObject *t = Py_TYPE(loop);
    PyObject *name = s_name[H_CALL_SOON];
    if (!hook[H_CALL_SOON] || !ppk_py_generic_first(t) ||
        _PyType_Lookup(t, name) != (PyObject *)hook[H_CALL_SOON])
        return 0;
    /* Nor one set on the loop itself. */
    PyObject *dict = PyObject_GenericGetDict(loop, NULL); /* an allocation at most */
    if (!dict) {
        PyErr_Clear();
        return 0;
    }
    int own = ppk_py_dict_get(dict, name, ppk_py_dict_plain(dict)) != NULL;
    Py_DECREF(dict);
    return !own;
}

size_t ppk_py_hook_take(SamplerObject *sp, PyObject **into, int *overflow) {
    *overflow = 0;
    if (marks.owner != sp) return 0;
    size_t n = marks.n;
    /* The set holds this batch only: cleared slot by slot, it is empty after. */
    for (size_t k = 0; k < n; k++) {
        PyObject *t = into[k] = marks.task[k];
        size_t i = ppk_py_ptr_hash(t, SET_MASK);
        while (marks.set[i] != t) i = (i + 1) & SET_MASK;
        marks.set[i] = NULL;
    }
    marks.n = 0;
    *overflow = marks.overflow;
    marks.overflow = 0;
    return n;
}

void ppk_py_hook_release(SamplerObject *sp) {
    if (marks.owner != sp) return;
    marks.owner = NULL; /* first: what runs below notes nothing */
    for (int which = 0; which < N_HOOKS; which++) {
        HookObject *h = hook[which];
        if (!h) continue;
        hook[which] = NULL;
        /* Given back only if it is still the hook (another wrapper may hold it). */
        if (_PyType_Lookup(hooked_class, s_name[which]) == (PyObject *)h &&
            PyObject_SetAttr((PyObject *)hooked_class, s_name[which], h->orig))
            PyErr_Clear();
        Py_DECREF(h);
    }
    Py_CLEAR(hooked_class);
    size_t n = marks.n;
    marks.n = 0;
    marks.overflow = 0;
    memset(marks.set, 0, 2 * MARKS_CAP * sizeof *marks.set);
    for (size_t k = 0; k < n; k++) Py_DECREF(marks.task[k]);
}
