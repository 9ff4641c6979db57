/*
 * sampler_walk.c - the Sampler's phase 1 (sampler.c explains the whole): reading the
 * interpreter with the GIL held, without running any Python code.
 *
 * Per thread: its frames (read from the interpreter's frames by internals.c, through a
 * frame cache), its name (threading._active), the asyncio task it is running
 * (asyncio.tasks._current_tasks and each loop's _thread_id, names that CPython 3.11 to
 * 3.13 all have) and the labels of pprofkit.tag(). What the gathered data points to
 * (strings of code objects, names, tags) is kept alive by references released at the
 * next pass.
 *
 * A pass creates objects: ints made for dict lookups, a task's callbacks as a list, weak
 * references to the futures tasks wait on. On
 * CPython 3.11 creating a GC-tracked object may run a collection there and then, with
 * its finalizers: Python code, which could let the GIL go and other threads change the
 * frames and the thread list being walked. The cyclic GC is therefore disabled during a
 * pass (and enabled again if it was; no other thread can run meanwhile); 3.12 and later
 * only schedule collections.
 */
#include "sampler.h"
#include "sampler_tasks.h"

/* Interned module and attribute names and _asyncio.Task.get_name, set up once. */
static PyObject *str_name, *str_thread_id, *str_get_name, *str_active, *str_current_tasks,
    *str_Task, *str_threading, *str_asyncio_tasks, *str__asyncio, *task_get_name;

int ppk_py_walk_ready(void) {
    if (!str_name) {
        str_name = PyUnicode_InternFromString("_name");
        str_thread_id = PyUnicode_InternFromString("_thread_id");
        str_get_name = PyUnicode_InternFromString("get_name");
        str_active = PyUnicode_InternFromString("_active");
        str_current_tasks = PyUnicode_InternFromString("_current_tasks");
        str_Task = PyUnicode_InternFromString("Task");
        str_threading = PyUnicode_InternFromString("threading");
        str_asyncio_tasks = PyUnicode_InternFromString("asyncio.tasks");
        str__asyncio = PyUnicode_InternFromString("_asyncio");
        if (!str_name || !str_thread_id || !str_get_name || !str_active ||
            !str_current_tasks || !str_Task || !str_threading || !str_asyncio_tasks ||
            !str__asyncio)
            return -1;
    }
    return 0;
}

/* Dicts looked up without running Python code. A lookup compares keys of equal hash
 * with ==, which runs the __eq__ of a key whose type is the program's (a str subclass
 * with its own __eq__ in a thread's __dict__, say): Python code, which may let the GIL
 * go in the middle of a pass, while the pass holds pointers to thread states and tasks
 * that other threads may then free. A dict is "plain" when its keys are all exact str
 * or int: comparing those runs no Python code. */
int ppk_py_dict_plain(PyObject *d) {
    if (ppk_py_dict_str_keys(d)) return 1;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(d, &pos, &k, &v))
        if (!PyUnicode_CheckExact(k) && !PyLong_CheckExact(k)) return 0;
    return 1;
}

/* d[key] (borrowed) or NULL, for an exact str or int key, without running Python code:
 * looked up when d is plain (ppk_py_dict_plain; the caller may know it), else scanned,
 * only keys of key's exact type compared. */
PyObject *ppk_py_dict_get(PyObject *d, PyObject *key, int plain) {
    if (!PyDict_Check(d)) return NULL;
    if (plain) return PyDict_GetItem(d, key);
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    int str = PyUnicode_CheckExact(key);
    while (PyDict_Next(d, &pos, &k, &v)) {
        if (k == key) return v;
        if (Py_TYPE(k) != Py_TYPE(key)) continue;
        if (str ? PyUnicode_Compare(k, key) == 0
                : PyObject_RichCompareBool(k, key, Py_EQ) == 1) /* exact ints */
            return v;
    }
    PyErr_Clear();
    return NULL;
}

/* "__getattribute__", and object.__getattribute__ (borrowed: the base type's), looked up
 * once. */
static PyObject *s_getattribute, *object_getattribute;

int ppk_py_generic_first(PyTypeObject *t) {
    if (t->tp_getattro == PyObject_GenericGetAttr) return 1;
    /* A class of the program's with __getattr__ and no __getattribute__ of its own: its
     * lookup is the generic one, then __getattr__ for a name that one does not find. */
    if (!object_getattribute) {
        if (!s_getattribute && !(s_getattribute = PyUnicode_InternFromString("__getattribute__"))) {
            PyErr_Clear();
            return 0;
        }
        object_getattribute = _PyType_Lookup(&PyBaseObject_Type, s_getattribute);
        if (!object_getattribute) return 0;
    }
    return _PyType_Lookup(t, s_getattribute) == object_getattribute;
}

/* obj.name when it can be read without running Python code: the type's attribute
 * lookup is the generic one (ppk_py_generic_first: a __getattr__ is not called, the
 * name not found then) and the type has no descriptor of that name (a plain class
 * attribute is fine); the instance's __dict__ is read with ppk_py_dict_get. A new
 * reference, or NULL (no error set). The type's attributes are looked up with
 * _PyType_Lookup (3.11 to 3.13: the MRO walk behind the type cache, which raises
 * nothing, so a missing attribute costs no exception object). */
PyObject *ppk_py_safe_getattr(PyObject *obj, PyObject *name) {
    if (!ppk_py_generic_first(Py_TYPE(obj))) return NULL;
    PyObject *cls_attr = _PyType_Lookup(Py_TYPE(obj), name);
    if (cls_attr && Py_TYPE(cls_attr)->tp_descr_get) return NULL;
    PyObject *dict = PyObject_GenericGetDict(obj, NULL); /* an allocation at most */
    if (!dict) PyErr_Clear();
    PyObject *v = dict ? ppk_py_dict_get(dict, name, ppk_py_dict_plain(dict)) : NULL;
    v = Py_XNewRef(v ? v : cls_attr); /* the object holds its dict, the type its attribute */
    Py_XDECREF(dict);
    return v;
}

/* sys.modules[mod].attr if that module is imported (borrowed), else NULL. */
PyObject *ppk_py_module_attr(PyObject *mod, PyObject *attr) {
    PyObject *modules = PyImport_GetModuleDict();
    PyObject *m = modules && PyDict_Check(modules)
                      ? ppk_py_dict_get(modules, mod, ppk_py_dict_plain(modules))
                      : NULL;
    if (!m || !PyModule_Check(m)) return NULL;
    PyObject *d = PyModule_GetDict(m);
    return d ? ppk_py_dict_get(d, attr, ppk_py_dict_plain(d)) : NULL;
}

/* Keeps a reference until the next phase 1. -1 on allocation failure (o released). */
int ppk_py_keep_ref(SamplerObject *sp, PyObject *o) {
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
ppk_str ppk_py_utf8(PyObject *s) {
    Py_ssize_t n;
    const char *p = PyUnicode_Check(s) ? PyUnicode_AsUTF8AndSize(s, &n) : NULL;
    if (!p) {
        PyErr_Clear();
        return (ppk_str){NULL, 0};
    }
    return (ppk_str){p, (size_t)n};
}

ppk_str ppk_py_utf8_repair(PyObject *s, size_t max_len, PyObject **bytes) {
    *bytes = NULL;
    ppk_str u = ppk_py_utf8(s);
    if (u.len || !PyUnicode_Check(s) || !PyUnicode_GET_LENGTH(s)) return u;
    Py_ssize_t keep = max_len < (size_t)PY_SSIZE_T_MAX ? (Py_ssize_t)max_len + 1 : PY_SSIZE_T_MAX;
    PyObject *head = PyUnicode_GET_LENGTH(s) > keep ? PyUnicode_Substring(s, 0, keep)
                                                    : Py_NewRef(s);
    /* The C UTF-8 encoder writes a lone surrogate as its three bytes; the library
     * replaces such a sequence (not UTF-8) and counts the repair. */
    *bytes = head ? PyUnicode_AsEncodedString(head, "utf-8", "surrogatepass") : NULL;
    Py_XDECREF(head);
    if (!*bytes) {
        PyErr_Clear();
        return u;
    }
    return (ppk_str){PyBytes_AS_STRING(*bytes), (size_t)PyBytes_GET_SIZE(*bytes)};
}

ppk_str ppk_py_utf8_kept(SamplerObject *sp, PyObject *s) {
    PyObject *bytes;
    ppk_str u = ppk_py_utf8_repair(s, sp->recorder->max_string_len, &bytes);
    return bytes && ppk_py_keep_ref(sp, bytes) ? (ppk_str){NULL, 0} : u;
}

/* Code names and filenames with lone surrogates (a file name that is not UTF-8, decoded
 * with surrogateescape) repaired this many at most; past it, such a name is empty. */
#define REPAIRS_MAX 1024

/* The UTF-8 of a code's name or filename `s`, alive while the sampler runs: the str's
 * own, or repairable bytes kept in sp->repairs (a frame cache entry's strings stay in
 * use for as long as it holds its code, and copies of them until the next pass).
 * sp->repairs maps id(s) to (s, bytes): by identity, so that the bytes live as long as
 * that str does (a code whose name is an equal str gets its own; once no code holds a
 * str, its entry goes at the next sweep: sweep_repairs). The bytes are those of the
 * str's first max_string_len + 1 characters only (ppk_py_utf8_repair): an entry costs at
 * most 4 bytes a character of max_string_len, whatever the name's length. */
static ppk_str code_str(SamplerObject *sp, PyObject *s) {
    ppk_str u = ppk_py_utf8(s);
    if (u.len || !PyUnicode_CheckExact(s) || !PyUnicode_GET_LENGTH(s) || !sp->repairs) return u;
    PyObject *id = PyLong_FromVoidPtr(s);
    PyObject *pair = id ? PyDict_GetItemWithError(sp->repairs, id) : NULL;
    PyObject *bytes = pair ? PyTuple_GET_ITEM(pair, 1) : NULL;
    if (id && !pair && !PyErr_Occurred() && PyDict_GET_SIZE(sp->repairs) < REPAIRS_MAX) {
        PyObject *b;
        ppk_py_utf8_repair(s, sp->recorder->max_string_len, &b);
        pair = b ? PyTuple_Pack(2, s, b) : NULL;
        if (pair && !PyDict_SetItem(sp->repairs, id, pair)) bytes = b;
        Py_XDECREF(pair); /* the dict holds it */
        Py_XDECREF(b);
    }
    Py_XDECREF(id);
    PyErr_Clear();
    return bytes ? (ppk_str){PyBytes_AS_STRING(bytes), (size_t)PyBytes_GET_SIZE(bytes)} : u;
}

/* A running task's name, read without running Python code (NULL if unknown): C
 * get_name, which on 3.12 and 3.13 formats an unnamed task's name the first time and
 * checks for signals as it does (ppk_py_checks_begin). */
PyObject *ppk_py_task_name(PyObject *task) {
    if (task_get_name) {
        if (_PyType_Lookup(Py_TYPE(task), str_get_name) == task_get_name) {
            int checks = ppk_py_checks_begin();
            if (checks < 0) return NULL; /* read at a later pass */
            PyObject *name = PyObject_CallOneArg(task_get_name, task);
            ppk_py_checks_end(checks);
            if (!name) PyErr_Clear();
            return name;
        }
    }
    return ppk_py_safe_getattr(task, str_name); /* the pure-Python Task keeps it in _name */
}

PyObject *ppk_py_tags_of(PyObject *tags, PyObject *key) {
    if (!tags || !key) return NULL;
    PyObject *t = PyDict_GetItemWithError(tags, key);
    if (!t) PyErr_Clear();
    return t && PyTuple_Check(t) ? t : NULL;
}

/* The tuple holds (key, value) pairs, each value a str or an int. */
size_t ppk_py_tag_labels(PyObject *t, vec *labels) {
    size_t n = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(t); i++) {
        PyObject *pair = PyTuple_GET_ITEM(t, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) continue;
        PyObject *k = PyTuple_GET_ITEM(pair, 0), *v = PyTuple_GET_ITEM(pair, 1);
        glabel l = {ppk_py_utf8(k), {NULL, 0}, 0, 0};
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
            l.str = ppk_py_utf8(v);
        } else {
            continue;
        }
        glabel *slot = vec_push(labels);
        if (!slot) break;
        *slot = l;
        n++;
    }
    return n;
}

/* The labels of pprofkit.tag() for `key` in dict `tags`, their tuple kept until the
 * next pass. */
static void gather_tags(SamplerObject *sp, gbuf *b, PyObject *tags, PyObject *key,
                        gthread *gt) {
    PyObject *t = ppk_py_tags_of(tags, key);
    if (t && !ppk_py_keep_ref(sp, Py_NewRef(t))) gt->n_labels += ppk_py_tag_labels(t, &b->labels);
}

/* Drops the first n_outer labels of gt (its thread's tags) whose key one of the
 * labels after them (its running task's tags, inner blocks) has: the inner value wins,
 * and the library would refuse a key twice. gt's labels are the last in b. */
static void drop_outer_keys(gbuf *b, gthread *gt, size_t n_outer) {
    glabel *l = &AT(b->labels, glabel, gt->first_label);
    size_t kept = 0;
    for (size_t i = 0; i < gt->n_labels; i++) {
        int inner_has = 0;
        for (size_t j = n_outer; i < n_outer && !inner_has && j < gt->n_labels; j++)
            inner_has = l[i].key.len == l[j].key.len &&
                        memcmp(l[i].key.ptr, l[j].key.ptr, l[i].key.len) == 0;
        if (!inner_has) l[kept++] = l[i];
    }
    b->labels.n -= gt->n_labels - kept;
    gt->n_labels = kept;
}

static atomic_ulong hidden_thread;

void ppk_py_hide_thread(unsigned long ident) { atomic_store(&hidden_thread, ident); }

/* Replaces the held *slot by `found` (borrowed; NULL: none): the old one goes with the
 * pass's references, or stays if there is no room for it. */
static void aio_hold(SamplerObject *sp, PyObject **slot, PyObject *found) {
    if (found == *slot) return;
    if (*slot && vec_reserve(&sp->refs, 1)) return;
    if (*slot) ppk_py_keep_ref(sp, *slot); /* cannot fail now */
    *slot = Py_XNewRef(found);
}

/* Whether an object the pass reads was not found. */
static int aio_missing(const SamplerObject *sp) {
    return !sp->aio.current || (sp->tasks && !sp->aio.set);
}

void ppk_py_aio_refresh(SamplerObject *sp) {
    int due = sp->aio.uses++ % AIO_REFRESH == 0;
    if (!due && !aio_missing(sp)) return;
    /* Until asyncio is imported, after every import: the first tasks are seen at once.
     * (Reading the size costs a line; a lookup that finds nothing, a few more.) */
    PyObject *modules = PyImport_GetModuleDict();
    Py_ssize_t len = modules && PyDict_Check(modules) ? PyDict_GET_SIZE(modules) : -1;
    if (!due && len == sp->aio.modules_len) return;
    if (due || !sp->aio.current) {
        PyObject *current = ppk_py_module_attr(str_asyncio_tasks, str_current_tasks);
        aio_hold(sp, &sp->aio.current, current && PyDict_Check(current) ? current : NULL);
    }
    if (sp->tasks && (due || !sp->aio.set)) {
        ppk_py_asyncio_find();
        PyObject *set = ppk_py_task_set();
        aio_hold(sp, &sp->aio.set, set);
        Py_XDECREF(set);
    }
    sp->aio.modules_len = aio_missing(sp) ? len : -1;
}

size_t ppk_py_running_tasks(SamplerObject *sp, vec *out) {
    out->n = 0;
    PyObject *current = sp->aio.current;
    if (!current) return 0;
    if (!task_get_name) {
        /* asyncio is imported: its C Task type's get_name, looked up once. */
        PyObject *task_type = ppk_py_module_attr(str__asyncio, str_Task);
        if (task_type && PyType_Check(task_type)) {
            task_get_name = PyObject_GetAttr(task_type, str_get_name);
            if (!task_get_name) PyErr_Clear();
        }
    }
    Py_ssize_t pos = 0;
    PyObject *loop, *task;
    /* One a loop in a step (at most one a thread), and room for the main thread's
     * (ppk_py_gather). */
    if (vec_reserve(out, (size_t)PyDict_GET_SIZE(current) + 1)) return 0;
    while (PyDict_Next(current, &pos, &loop, &task)) {
        PyObject *tid = ppk_py_safe_getattr(loop, str_thread_id);
        if (tid && PyLong_Check(tid)) {
            unsigned long ident = PyLong_AsUnsignedLong(tid);
            if (!PyErr_Occurred()) AT(*out, running_task, out->n++) = (running_task){ident, task};
        }
        PyErr_Clear();
        Py_XDECREF(tid);
    }
    return out->n;
}

/* The frame cache slot of (code, lasti): the one holding it, or the one it would take. */
static inline size_t fcache_slot(PyCodeObject *code, int lasti) {
    uint64_t h = ((uint64_t)(uintptr_t)code >> 4) * 0x9E3779B97F4A7C15u ^ (uint64_t)lasti;
    return (size_t)((h * 0xBF58476D1CE4E5B9u >> 40) % FCACHE_SIZE);
}

/* ---- The number of entries holding each code (sampler.h, FCOUNT_SIZE) ---- */

static inline size_t fcount_home(const PyCodeObject *code) {
    return (size_t)(((uint64_t)(uintptr_t)code >> 4) * 0x9E3779B97F4A7C15u >> 40) &
           (FCOUNT_SIZE - 1);
}

/* The slot of `code`, or the empty one where it would go (there is always one: at most
 * FCACHE_SIZE codes in twice as many slots). */
static fcount *fcount_find(SamplerObject *sp, const PyCodeObject *code) {
    for (size_t i = fcount_home(code);; i = (i + 1) & (FCOUNT_SIZE - 1)) {
        fcount *c = &sp->fcounts[i];
        if (c->code == code || !c->code) return c;
    }
}

static void fcount_add(SamplerObject *sp, PyCodeObject *code) {
    fcount *c = fcount_find(sp, code);
    c->code = code;
    c->n++;
}

/* One entry less holds `code`; at none its slot is emptied, the slots after it in its
 * run moved back (no tombstones). */
static void fcount_sub(SamplerObject *sp, PyCodeObject *code) {
    fcount *c = fcount_find(sp, code);
    assert(c->code == code && c->n > 0);
    if (--c->n) return;
    size_t hole = (size_t)(c - sp->fcounts);
    for (size_t i = (hole + 1) & (FCOUNT_SIZE - 1); sp->fcounts[i].code;
         i = (i + 1) & (FCOUNT_SIZE - 1)) {
        size_t home = fcount_home(sp->fcounts[i].code);
        /* It may fill the hole if its home is not in (hole, i], cyclically. */
        if (((i - home) & (FCOUNT_SIZE - 1)) >= ((i - hole) & (FCOUNT_SIZE - 1))) {
            sp->fcounts[hole] = sp->fcounts[i];
            hole = i;
        }
    }
    sp->fcounts[hole] = (fcount){NULL, 0};
}

/* Entry e no longer holds its code, which goes with the pass's references (room was
 * made in sp->refs). */
static void entry_evict(SamplerObject *sp, gframe *e) {
    fcount_sub(sp, e->code);
    sp->fheld[(size_t)(e - sp->fcache) / FCACHE_SWEEP]--;
    ppk_py_keep_ref(sp, (PyObject *)e->code); /* cannot fail now */
    sp->fcache_evictions++;
    /* A stamped copy is one whose code its entry holds: held_since relies on it.
     * (Evictions in add_frames stamp the slot again at once, and the others, of
     * tasks' frames, of the main thread's callback and of sweeps, come after a pass's
     * walks or before them; this keeps it true whatever the order.) */
    sp->fstamps[e - sp->fcache].gen = 0;
    *e = (gframe){0};
}

/* What the frame at instruction offset `lasti` of `code` (borrowed) shows, from its
 * cache entry `e` or computed (and cached there). -1: no memory. */
static int entry_frame(SamplerObject *sp, gframe *e, PyCodeObject *code, int lasti,
                       gframe *out) {
    if (e->code == code && e->lasti == lasti) {
        *out = *e;
        return 0;
    }
    sp->fcache_misses++;
    /* The evicted code is released at the next pass: strings gathered before in this
     * tick may point into it. The room is made first, so that a failure changes
     * nothing. */
    if (e->code && vec_reserve(&sp->refs, 1)) return -1;
    if (e->code) entry_evict(sp, e);
    int line = PyCode_Addr2Line(code, lasti);
    /* The entry holds a reference to code. */
    *e = (gframe){code_str(sp, code->co_qualname), code_str(sp, code->co_filename), code->co_firstlineno,
                  line > 0 ? line : 0, 0, (PyCodeObject *)Py_NewRef(code), lasti,
                  (uint16_t)(e - sp->fcache), (uint8_t)ppk_py_frame_traceable(code, lasti)};
    fcount_add(sp, code);
    sp->fheld[(size_t)(e - sp->fcache) / FCACHE_SWEEP]++;
    *out = *e;
    return 0;
}

int ppk_py_code_frame(SamplerObject *sp, PyCodeObject *code, int lasti, gframe *out) {
    return entry_frame(sp, &sp->fcache[fcache_slot(code, lasti)], code, lasti, out);
}

/* Drops the repairs (code_str) whose str only sp->repairs holds: no code has it, so
 * no cache entry can. The entry, with its str and bytes, goes with the pass's
 * references (copies of the bytes gathered this tick may be in use). No Python code
 * runs: the keys are ints, the values tuples. */
static void sweep_repairs(SamplerObject *sp) {
    PyObject *dead[REPAIRS_MAX];
    size_t n = 0;
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (n < REPAIRS_MAX && PyDict_Next(sp->repairs, &pos, &k, &v))
        if (PyTuple_Check(v) && Py_REFCNT(PyTuple_GET_ITEM(v, 0)) == 1) dead[n++] = k;
    if (!n || vec_reserve(&sp->refs, n)) return;
    for (size_t i = 0; i < n; i++) {
        PyObject *pair = PyDict_GetItemWithError(sp->repairs, dead[i]);
        if (!pair) break; /* (cannot be) */
        ppk_py_keep_ref(sp, Py_NewRef(pair)); /* cannot fail now */
        if (PyDict_DelItem(sp->repairs, dead[i])) break;
    }
    PyErr_Clear();
}

void ppk_py_fcache_sweep(SamplerObject *sp) {
    if (!sp->fcache || vec_reserve(&sp->refs, FCACHE_SWEEP)) return;
    gframe *e = &sp->fcache[sp->fsweep];
    if (!sp->fheld[sp->fsweep / FCACHE_SWEEP]) goto next; /* nothing to look at */
    /* The codes' counts and the counts' slots are cold lines: asked for together. */
    for (size_t i = 0; i < FCACHE_SWEEP; i++)
        if (e[i].code) {
            __builtin_prefetch(e[i].code);
            __builtin_prefetch(&sp->fcounts[fcount_home(e[i].code)]);
        }
    for (size_t i = 0; i < FCACHE_SWEEP; i++) {
        /* Every reference to it is an entry's: no frame runs it, and none can again
         * (the sampler's other references, in sp->refs and in tasks' stacks, only add
         * to the count: such a code stays until a later turn). */
        if (e[i].code && Py_REFCNT(e[i].code) == fcount_find(sp, e[i].code)->n)
            entry_evict(sp, &e[i]);
    }
next:
    sp->fsweep = (sp->fsweep + FCACHE_SWEEP) % FCACHE_SIZE;
    if (!sp->fsweep && sp->repairs && PyDict_GET_SIZE(sp->repairs)) sweep_repairs(sp);
}

void ppk_py_apply_fixups(SamplerObject *sp, gbuf *b) {
    for (size_t i = 0; i < b->fixups.n; i++) {
        const fixup *x = &AT(b->fixups, fixup, i);
        gframe *e = &sp->fcache[x->slot];
        /* A code the entry held since the fixup's pass is alive (the entry or the kept
         * references hold it), so an equal address is the same code. */
        if (e->code == x->code && e->lasti == x->lasti) e->fid = x->fid;
    }
    b->fixups.n = 0;
}

#if PY_VERSION_HEX < 0x030C0000
int ppk_py_gc_pause(void) { return PyGC_Disable(); }

void ppk_py_gc_resume(int was_enabled) {
    if (was_enabled) PyGC_Enable();
}
#else
/* 3.12 and later only schedule a collection (at a bytecode boundary): nothing to do,
 * and the collector's state is not read (a cache miss a pass). */
int ppk_py_gc_pause(void) { return 0; }

void ppk_py_gc_resume(int was_enabled) { (void)was_enabled; }
#endif

/* A thread whose CPU clock has not moved since its previous sample has run no code
 * since: its frames are the ones gathered then (`prev`, its slot), which phase 0 copied
 * into this pass (ppk_py_prepare) when the clock had not moved by then, instead of
 * walking them here. The clock is read again here, with the GIL (gt->cpu_now): still
 * unchanged, the thread has not run since phase 0 either, so the copy is its stack now,
 * and the task and tags read now go with it. Their strings belong to code objects that
 * the thread releases when it pops those frames, which it may do as soon as the GIL is
 * released, so each copied frame's code must be held until the next pass, like a walked
 * frame's: by its frame cache entry if that still holds it (an entry evicted from now on
 * keeps its code in sp->refs until the next pass), else by a reference taken here. When
 * no entry was evicted since all these frames were found in their entries
 * (held_since), there is nothing to check. 1 if taken; 0 (nothing changed) if there is
 * no copy, the thread ran, or there is no room for the references. */
static int reuse_frames(SamplerObject *sp, gbuf *b, gthread *gt, const tslot *prev) {
    if (!prev || prev->pre_first == NO_COPY || gt->cpu_now != prev->cpu_ns) return 0;
    size_t n = prev->n_frames;
    int check = prev->held_since != sp->fcache_evictions;
    if (check && vec_reserve(&sp->refs, n)) return 0;
    gt->first_frame = prev->pre_first; /* phase 0 copied them there */
    gt->n_frames = n;
    gt->omitted = prev->omitted;
    gt->held_since = prev->held_since;
    if (!check) return 1;
    const uint32_t *to = &AT(b->frames, uint32_t, gt->first_frame);
    gt->held_since = sp->fcache_evictions;
    for (size_t i = 0; i < n; i++) {
        const gframe *g = &AT(b->uniq, gframe, to[i]);
        const gframe *e = &sp->fcache[g->slot];
        if (e->code == g->code && e->lasti == g->lasti) continue;
        Py_INCREF(g->code);
        ppk_py_keep_ref(sp, (PyObject *)g->code); /* cannot fail: room was made */
        gt->held_since = NOT_HELD;
    }
    return 1;
}

/* Frames taken from a walk at a time: their cache entries are asked for together. */
#define WALK_BATCH 64
_Static_assert(AHEAD_DEPTH <= WALK_BATCH, "a batch read ahead is one batch");

/* Adds n frames read from the interpreter to thread gt in b. In a pass's buffer
 * (sp->tick), a frame whose cache entry this phase 1 copied already takes that copy:
 * the entry still holds its code (an eviction clears the stamp). -1: no memory. */
static int add_frames(SamplerObject *sp, gbuf *b, gthread *gt, const ppk_py_frame_ref *refs,
                      size_t n) {
    if (b->uniq.n + n > UINT32_MAX || vec_reserve(&b->frames, n) || vec_reserve(&b->uniq, n))
        return -1;
    uint32_t *out = &AT(b->frames, uint32_t, b->frames.n);
    fstamp *stamps = b == &sp->tick ? sp->fstamps : NULL;
    uint16_t slots[WALK_BATCH];
    for (size_t i = 0; i < n; i++) {
        slots[i] = (uint16_t)fcache_slot(refs[i].code, refs[i].lasti);
        __builtin_prefetch(&sp->fcache[slots[i]]);
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const ppk_py_frame_ref *r = &refs[i];
        if (stamps) {
            const fstamp *st = &stamps[slots[i]];
            if (st->gen == sp->fgen && st->idx < b->uniq.n) {
                const gframe *u = &AT(b->uniq, gframe, st->idx);
                if (u->code == r->code && u->lasti == r->lasti) {
                    if (r->complete || u->traceable) out[k++] = st->idx;
                    continue;
                }
            }
        }
        gframe *e = &sp->fcache[slots[i]];
        /* Whether a frame is past its prologue is known to its cache entry: the code
         * object is read only when there is none. */
        int known = e->code == r->code && e->lasti == r->lasti;
        if (!r->complete && !(known ? e->traceable : ppk_py_frame_traceable(r->code, r->lasti)))
            continue;
        if (entry_frame(sp, e, r->code, r->lasti, &AT(b->uniq, gframe, b->uniq.n))) return -1;
        if (stamps) stamps[slots[i]] = (fstamp){sp->fgen, (uint32_t)b->uniq.n};
        out[k++] = (uint32_t)b->uniq.n++;
    }
    b->frames.n += k;
    gt->n_frames += k;
    return 0;
}

/* Gathers thread t's frames, leaf first, into b (internals.c reads them): those read
 * ahead (`ahead`, or NULL), then the rest of the walk, up to the recorder's max_frames;
 * the frames past those are counted (gt->omitted), not read: the sample would keep
 * none of them (a deep recursion's tens of thousands of frames would cost the pass
 * milliseconds with the GIL). -1: no memory. */
static int walk_frames(SamplerObject *sp, gbuf *b, gthread *gt, PyThreadState *t,
                       const ppk_py_ahead *ahead) {
    uint64_t evictions = sp->fcache_evictions;
    size_t keep = sp->recorder->max_frames;
    ppk_py_walk w;
    ppk_py_frame_ref buf[WALK_BATCH];
    const ppk_py_frame_ref *refs = buf;
    size_t n = 0, taken = 0; /* frames read and not yet taken; frames taken */
    if (ahead) {
        w = ahead->walk;
        refs = ahead->refs;
        n = ahead->n;
    } else {
        ppk_py_walk_begin(&w, t);
    }
    for (;;) {
        while (n && gt->n_frames < keep) {
            size_t m = n < keep - gt->n_frames ? n : keep - gt->n_frames;
            if (add_frames(sp, b, gt, refs, m)) return -1;
            refs += m;
            n -= m;
            taken += m;
        }
        if (gt->n_frames >= keep || !(n = ppk_py_walk_read(&w, buf, WALK_BATCH))) break;
        refs = buf;
    }
    gt->omitted = 0;
    if (gt->n_frames >= keep && (n || w.f)) {
        /* CPython's count of the thread's frames where it has one (no walk at all),
         * else the rest of the walk, its links only. */
        long all = ppk_py_frame_count(t);
        gt->omitted = all > 0 && (size_t)all >= taken + n ? (size_t)all - taken
                                                          : n + ppk_py_walk_count(&w);
    }
    /* Every entry still holds its code unless a deeper frame evicted one. */
    gt->held_since = sp->fcache_evictions == evictions ? evictions : NOT_HELD;
    return 0;
}

/* Moves the reference to `o` at index i of the previous pass's references to this
 * pass's, without touching the object (its line is likely in another core's cache): 1,
 * or 0 if i is not such a reference or there is no room. */
static int take_ref(SamplerObject *sp, size_t i, PyObject *o) {
    if (i >= sp->old_refs.n || AT(sp->old_refs, PyObject *, i) != o) return 0;
    PyObject **slot = vec_push(&sp->refs);
    if (!slot) return 0;
    *slot = o;
    AT(sp->old_refs, PyObject *, i) = NULL;
    return 1;
}

/* Passes between two readings of a thread's name. */
#define NAME_REFRESH 16

int ppk_py_gather_thread(SamplerObject *sp, gbuf *b, PyThreadState *t, const tslot *prev,
                         const ppk_py_ahead *ahead, threads_dict *active, const running_task *tasks,
                         size_t n_tasks) {
    /* A thread running no Python code (a C thread holding a thread state) gets no
     * sample, but an entry all the same: its time goes on from its previous sample. */
    gthread *gt = vec_push(&b->threads);
    if (!gt) return -1;
    memset(gt, 0, sizeof *gt);
    gt->ident = t->thread_id;
    gt->native_id = t->native_thread_id;
    gt->ts = t;
    int other = prev && prev != &sp->main_prev;
    if (other && prev->pre_cpu >= 0 && prev->pre_cpu != prev->cpu_ns) {
        /* Running at phase 0 (CPU_FRESH_NS). Taken before the frames, that reading
         * also proves them unchanged at the next tick if the clock has not moved. */
        gt->cpu_now = sp->pre_fresh ? prev->pre_cpu : CPU_LATER;
        gt->cpu_pre = prev->pre_cpu;
    } else if (other && prev->pre_first != NO_COPY && sp->gil_kept && t != sp->holder_pre &&
               t != PyThreadState_Get()) {
        gt->unread = prev->pre_assumed ? prev->unread + 1 : 0;
        /* It had not taken the GIL since its frames were taken: phase 0 found its
         * clock unmoved, or took it as unmoved because the GIL had not changed holders
         * since the previous pass. To run Python code since, it would have had to take
         * the GIL from another holder, a change that CPython counts, and then this
         * pass's own take would count too: at most one change since phase 0 began is
         * this pass's take alone. So it has run no Python code since: reading its
         * clock again would prove no more. (Unless it held the GIL last when phase 0
         * began: it may have taken it back uncounted, or never let it go; or it runs
         * this pass, as the holder.) */
        gt->cpu_now = prev->pre_cpu;
    } else {
        gt->cpu_now = thread_cpu_ns(gt->native_id);
    }
    gt->first_frame = b->frames.n;
    gt->first_label = b->labels.n;
    int reused = reuse_frames(sp, b, gt, prev);
    gt->reused = reused;
    if (reused)
        sp->pass_reused++;
    else if (walk_frames(sp, b, gt, t, ahead))
        return -1;
    if (!gt->n_frames) return 0;
    /* A thread keeps the name it had at its previous sample, read again every
     * NAME_REFRESH passes (another thread may rename it): reading it (an int made for
     * the lookup in threading._active, the lookup, the attribute) costs about a
     * microsecond a thread when the threads that ran since have left the caches cold. */
    PyObject *name = NULL;
    int kept = 0;
    gt->name_ref = NO_REF;
    if (prev && prev->name_obj && sp->passes % NAME_REFRESH) {
        kept = take_ref(sp, prev->name_ref, prev->name_obj);
        if (kept) {
            gt->name = prev->name;
            gt->name_obj = prev->name_obj;
            gt->name_ref = sp->refs.n - 1;
        } else {
            name = Py_NewRef(prev->name_obj); /* alive: old_refs holds it */
        }
    }
    PyObject *ident = NULL;
    if ((!name && !kept) || (sp->tags_thread && PyDict_GET_SIZE(sp->tags_thread))) {
        ident = PyLong_FromUnsignedLong(gt->ident);
        if (!ident) PyErr_Clear();
    }
    if (!name && !kept) {
        PyObject *thread = ppk_py_thread_of(active, ident);
        name = thread ? ppk_py_safe_getattr(thread, str_name) : NULL;
    }
    if (name && !ppk_py_keep_ref(sp, name)) {
        size_t at = sp->refs.n - 1;
        gt->name = ppk_py_utf8_kept(sp, name);
        gt->name_obj = name;
        /* Its reference can move to the next pass's if it is all the UTF-8 needs (a
         * repaired name's bytes are another). */
        gt->name_ref = sp->refs.n - 1 == at ? at : NO_REF;
    }
    gather_tags(sp, b, sp->tags_thread, ident, gt);
    Py_XDECREF(ident);

    for (size_t i = 0; i < n_tasks; i++) {
        if (tasks[i].ident != gt->ident) continue;
        PyObject *task = tasks[i].task;
        gt->task_id = (int64_t)(uintptr_t)task;
        PyObject *tname = ppk_py_task_name(task);
        if (tname && !ppk_py_keep_ref(sp, tname)) gt->task_name = ppk_py_utf8_kept(sp, tname);
        PyObject *tid = PyLong_FromVoidPtr(task);
        if (!tid) PyErr_Clear();
        size_t n_thread = gt->n_labels;
        gather_tags(sp, b, sp->tags_task, tid, gt);
        Py_XDECREF(tid);
        if (n_thread && gt->n_labels > n_thread) drop_outer_keys(b, gt, n_thread);
        break;
    }
    return 0;
}

PyObject *ppk_py_threads_by_ident(threads_dict *d) {
    if (!d->looked) {
        d->looked = 1;
        PyObject *active = ppk_py_module_attr(str_threading, str_active);
        d->dict = active && PyDict_Check(active) ? active : NULL;
        d->plain = d->dict && ppk_py_dict_plain(d->dict);
    }
    return d->dict;
}

PyObject *ppk_py_thread_of(threads_dict *d, PyObject *ident) {
    PyObject *threads = ppk_py_threads_by_ident(d);
    return threads && ident ? ppk_py_dict_get(threads, ident, d->plain) : NULL;
}

/* Drops the references of `refs`. A last reference's finalizer may run Python code that
 * lets the GIL go, and a pass or the main thread's callback may then use the vector: it
 * is taken first (they find it empty), and given back unless one started a new one. */
static void release(vec *refs) {
    vec taken = *refs;
    refs->items = NULL;
    refs->n = refs->cap = 0;
    for (size_t i = 0; i < taken.n; i++) Py_XDECREF(AT(taken, PyObject *, i)); /* NULL: taken */
    taken.n = 0;
    if (refs->items)
        vec_free(&taken);
    else
        *refs = taken;
}

void ppk_py_release_refs(SamplerObject *sp) {
    release(&sp->old_refs);
    release(&sp->refs);
}

void ppk_py_forget_frames(SamplerObject *sp) {
    for (size_t i = 0; i < sp->slot_cap; i++) {
        sp->slots[i].n_frames = 0;
        sp->slots[i].name_obj = NULL; /* released by the failed pass */
    }
    sp->main_prev.n_frames = 0;
    sp->main_prev.name_obj = NULL;
    sp->prev.threads.n = 0; /* nor kept for the last pass (gather_stopper) */
}

/* Copies s into k->bytes at *at (room reserved). */
static ppk_str keep_str(kept_sample *k, size_t *at, ppk_str s) {
    if (!s.len) return (ppk_str){NULL, 0};
    char *to = (char *)k->bytes.items + *at;
    memcpy(to, s.ptr, s.len);
    *at += s.len;
    return (ppk_str){to, s.len};
}

void ppk_py_keep_sample(kept_sample *k, const gbuf *b, const gthread *gt) {
    k->valid = 0;
    k->frames.n = k->labels.n = k->bytes.n = 0;
    size_t n = gt->n_frames;
    const uint32_t *idx = &AT(b->frames, uint32_t, gt->first_frame);
    const glabel *l = &AT(b->labels, glabel, gt->first_label);
    size_t room = gt->name.len + gt->task_name.len + gt->parent_name.len + gt->task_state.len;
    for (size_t i = 0; i < gt->n_labels; i++) room += l[i].key.len + l[i].str.len;
    if (!n || vec_reserve(&k->frames, n) || vec_reserve(&k->labels, gt->n_labels) ||
        vec_reserve(&k->bytes, room))
        return;
    for (size_t i = 0; i < n; i++) {
        const gframe *g = &AT(b->uniq, gframe, idx[i]);
        if (!g->fid) return;
        AT(k->frames, ppk_id_frame, i) = (ppk_id_frame){g->fid, g->line};
    }
    k->frames.n = n;
    size_t at = 0;
    k->gt = *gt;
    k->gt.first_frame = k->gt.first_label = 0;
    k->gt.name_obj = NULL;
    k->gt.name_ref = NO_REF;
    k->gt.name = keep_str(k, &at, gt->name);
    k->gt.task_name = keep_str(k, &at, gt->task_name);
    k->gt.parent_name = keep_str(k, &at, gt->parent_name);
    k->gt.task_state = keep_str(k, &at, gt->task_state);
    for (size_t i = 0; i < gt->n_labels; i++) {
        glabel *to = &AT(k->labels, glabel, i);
        *to = l[i];
        to->key = keep_str(k, &at, l[i].key);
        to->str = keep_str(k, &at, l[i].str);
    }
    k->labels.n = gt->n_labels;
    k->bytes.n = at;
    k->valid = 1;
}

/* The last pass's sample of the thread that stops the sampler, t (its stack is the
 * stop's): its last sample's stack and labels, which the time since then goes to, the
 * way a sample's stack gets the time since the sample before. The main thread's last
 * sample is the previous pass's, if it gathered it (after any callback), else its last
 * callback's. The stack is pushed by function id only: a function evicted meanwhile
 * drops the sample (ppk_py_record), never names it wrongly. No sample without memory
 * or a kept sample. */
static void gather_stopper(SamplerObject *sp, PyThreadState *t) {
    int is_main = t->thread_id == sp->main_ident;
    const kept_sample *k = &sp->stopper_last;
    if (is_main && !sp->main_prev.native_id) {
        k = &sp->main_last;
    } else {
        sp->stopper_last.valid = 0;
        for (size_t i = 0; i < sp->prev.threads.n; i++) {
            const gthread *gt = &AT(sp->prev.threads, gthread, i);
            if (gt->ident == t->thread_id && gt->native_id == t->native_thread_id) {
                ppk_py_keep_sample(&sp->stopper_last, &sp->prev, gt);
                break;
            }
        }
    }
    size_t n = k->frames.n, nl = k->labels.n;
    gbuf *b = &sp->tick;
    if (!k->valid || b->uniq.n + n > UINT32_MAX || vec_reserve(&b->uniq, n) ||
        vec_reserve(&b->frames, n) || vec_reserve(&b->labels, nl) || vec_reserve(&b->threads, 1))
        return;
    gthread *gt = &AT(b->threads, gthread, b->threads.n++);
    *gt = k->gt;
    gt->first_frame = b->frames.n;
    gt->first_label = b->labels.n;
    for (size_t i = 0; i < n; i++) {
        const ppk_id_frame *f = &AT(k->frames, ppk_id_frame, i);
        AT(b->uniq, gframe, b->uniq.n) = (gframe){.fid = f->function, .line = f->line};
        AT(b->frames, uint32_t, b->frames.n++) = (uint32_t)b->uniq.n++;
    }
    if (nl) memcpy(&AT(b->labels, glabel, b->labels.n), k->labels.items, nl * sizeof(glabel));
    b->labels.n += nl;
    gt->cpu_now = gt->cpu_pre = t->native_thread_id ? thread_cpu_ns(t->native_thread_id) : -1;
    gt->wall_ns = 0;
    gt->reused = 0;
    gt->unread = 0;
    gt->held_since = NOT_HELD;
    gt->kept = 1;
    /* A main thread last found running gets its CPU time since, and what was carried
     * (ppk_py_main_deltas); last found blocking, its CPU time since is carried, and not
     * recorded. */
    gt->main_mode = !is_main ? 0 : k->gt.main_mode == MAIN_RUNNING ? MAIN_RUNNING : MAIN_BLOCKING;
}

/* Phase 1, in the sampler's thread or in the GIL's holder (sampler.c): every thread but
 * the sampler's, and the main thread only when it is blocked (its callback has not run
 * since it was asked for) or runs this. -1: no memory (tick skipped). */
int ppk_py_gather(SamplerObject *sp) {
    /* Asked for first: their misses overlap the work below. */
    for (size_t i = 0; i < sp->n_ts_ahead; i++) ppk_py_tstate_prefetch(sp->ts_ahead[i]);
    if (aio_missing(sp)) __builtin_prefetch(PyImport_GetModuleDict()); /* its size */
    ppk_py_apply_fixups(sp, &sp->prev); /* before the codes they name may go */
    if (++sp->fgen == 0) { /* stamps of 2^32 passes ago would match again */
        memset(sp->fstamps, 0, FCACHE_SIZE * sizeof *sp->fstamps);
        sp->fgen = 1;
    }
    vec held = sp->old_refs; /* empty */
    sp->old_refs = sp->refs;
    sp->refs = held;
    sp->tick.labels.n = sp->tick.threads.n = 0; /* frames: ppk_py_prepare */
    sp->pass_reused = 0;
    sp->passes++;
    sp->gil_takes_released = ppk_py_gil_takes(sp->interp); /* run_pass checks it again */
    sp->gil_kept = sp->gil_takes_released - sp->gil_takes_pre <= 1;
    int gc = ppk_py_gc_pause();
    int rc = 0;
    threads_dict active = {0};
    ppk_py_fcache_sweep(sp);
    ppk_py_aio_refresh(sp);
    size_t n_tasks = ppk_py_running_tasks(sp, &sp->running);
    running_task *tasks = sp->running.items;
    sp->main_blocked_now = 0;
    PyThreadState *self = PyThreadState_Get(); /* the sampler's, or the GIL's holder */
    struct {
        PyThreadState *t;
        const tslot *prev;
        int mode;
        ppk_py_ahead *ahead;
    } group[AHEAD_THREADS];
    ppk_py_ahead aheads[AHEAD_THREADS];
    ppk_py_walk walks[AHEAD_THREADS];
    size_t counts[AHEAD_THREADS];
    PyThreadState *t = PyInterpreterState_ThreadHead(sp->interp);
    while (t && !rc) {
        /* The next AHEAD_THREADS threads to gather. */
        size_t n = 0;
        for (; t && n < AHEAD_THREADS; t = PyThreadState_Next(t)) {
            /* A thread not started yet: on 3.11 it would pass for the one starting it. */
            if (t == sp->ts || !ppk_py_tstate_bound(t) ||
                t->thread_id == atomic_load_explicit(&hidden_thread, memory_order_relaxed))
                continue;
            if (sp->final && t->thread_id == sp->stopper) {
                gather_stopper(sp, t);
                continue;
            }
            int mode = 0;
            if (t->thread_id == sp->main_ident) {
                atomic_store(&sp->main_ts, t);
                int st = MAIN_REQUESTED;
                if (atomic_compare_exchange_strong(&sp->main_state, &st, MAIN_CANCELLED))
                    mode = MAIN_BLOCKING; /* it ran no Python code since the request */
                else if (st == MAIN_CANCELLED)
                    mode = MAIN_BLOCKED; /* nor since the previous tick's */
                else if (!sp->main_requested_now)
                    mode = MAIN_BLOCKING; /* not asked this tick (the last request was
                                           * pending, or refused): sampled here */
                else
                    continue; /* it sampled itself */
                if (t == self)
                    mode = MAIN_RUNNING; /* the GIL's holder, running this pass */
                else
                    sp->main_blocked_now = 1;
            }
            unsigned long native = t->native_thread_id ? t->native_thread_id : 1;
            const tslot *prev = mode ? &sp->main_prev
                                     : ppk_py_slot_find(sp->slots, sp->slot_cap, t->thread_id,
                                                        native);
            /* An empty slot (a new thread), or a main thread the previous pass did not
             * gather. */
            if (!prev->native_id || prev->ident != t->thread_id || prev->native_id != native)
                prev = NULL;
            group[n].t = t;
            group[n].prev = prev;
            group[n].mode = mode;
            group[n++].ahead = NULL;
        }
        /* Their walks, read ahead together: those of the threads whose frames phase 0
         * did not copy (they ran since their previous pass, or are new). A copy is
         * mostly taken (ppk_py_gather_thread decides). */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) {
            if (group[i].prev && group[i].prev->pre_first != NO_COPY) continue;
            ppk_py_walk_begin(&walks[m], group[i].t);
            group[i].ahead = &aheads[m++];
        }
        ppk_py_walk_ahead(walks, m, sp->ahead, AHEAD_DEPTH, counts);
        for (size_t i = 0; i < m; i++)
            aheads[i] = (ppk_py_ahead){walks[i], &sp->ahead[i * AHEAD_DEPTH], counts[i]};
        for (size_t i = 0; i < n && !rc; i++) {
            size_t k = sp->tick.threads.n;
            rc = ppk_py_gather_thread(sp, &sp->tick, group[i].t, group[i].prev, group[i].ahead,
                                      &active, tasks, n_tasks);
            if (sp->tick.threads.n > k) AT(sp->tick.threads, gthread, k).main_mode = group[i].mode;
        }
    }
    /* The tasks, unless this tick's callback read them. The task the main thread's
     * sample showed running at this tick is not sampled as waiting too. */
    if (!rc && !sp->tasks_by_cb && sp->tasks) {
        pthread_mutex_lock(&sp->lock);
        int answered = sp->main_answered == sp->main_seq;
        void *mt = answered ? sp->main_task : NULL;
        pthread_mutex_unlock(&sp->lock);
        if (mt && n_tasks < sp->running.cap) tasks[n_tasks++] = (running_task){sp->main_ident, mt};
        /* A main thread that sampled itself at this tick (its callback) has its time
         * counted up to main_wall_ns; one that this pass samples, up to the tick's. */
        ppk_py_gather_tasks(sp, &sp->tick, &active, tasks, n_tasks,
                            answered ? sp->main_wall_ns : 0);
    }
    ppk_py_gc_resume(gc);
    release(&sp->old_refs); /* a failed pass: the caller forgets the frames */
    return rc;
}
