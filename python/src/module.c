/*
 * module.c - the pprofkit._native module: its exceptions, the conversions of Python
 * arguments that every type uses, statistics as dicts, and module initialization.
 *
 * Exceptions: pprofkit.Error carries `code` (the negative PPK_E* value) and `message`
 * (ppk_strerror's text). Subclasses say what kind of failure it was, and also derive
 * from the built-in exception a Python caller would catch: InvalidArgumentError is a
 * ValueError, OutOfMemoryError a MemoryError, SystemCallError an OSError.
 */
#include "binding.h"

#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>

/* ---- Errors ------------------------------------------------------------------------ */

static PyObject *Error, *InvalidArgumentError, *OutOfMemoryError, *StateError, *ClosedError,
    *CompressError, *SystemCallError;

static PyObject *error_type(int code) {
    switch (code) {
    case PPK_EINVAL:
    case PPK_ENULL:
    case PPK_EVALUES:
    case PPK_EDUPLABEL:
    case PPK_ESPANID:
    case PPK_ERESERVED:
    case PPK_ETOOMANY:
    case PPK_EEMPTYKEY:
        return InvalidArgumentError;
    case PPK_ENOMEM:
        return OutOfMemoryError;
    case PPK_ESTATE:
        return StateError;
    case PPK_ECLOSED:
        return ClosedError;
    case PPK_ECOMPRESS:
        return CompressError;
    case PPK_ESYS:
        return SystemCallError;
    default:
        return Error;
    }
}

PyObject *ppk_py_error(int code, const char *what, const char *detail) {
    /* A failed system call says which (errno, as the library left it). */
    if (code == PPK_ESYS && !detail && errno) detail = strerror(errno);
    PyObject *msg;
    if (detail && *detail)
        msg = PyUnicode_FromFormat("%s: %s (%s)", what, ppk_strerror(code), detail);
    else
        msg = PyUnicode_FromFormat("%s: %s", what, ppk_strerror(code));
    if (!msg) return NULL;
    PyObject *exc = PyObject_CallOneArg(error_type(code), msg);
    Py_DECREF(msg);
    if (!exc) return NULL;
    PyObject *code_obj = PyLong_FromLong(code);
    PyObject *text = PyUnicode_FromString(ppk_strerror(code));
    if (code_obj && text && PyObject_SetAttrString(exc, "code", code_obj) == 0 &&
        PyObject_SetAttrString(exc, "message", text) == 0)
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_XDECREF(code_obj);
    Py_XDECREF(text);
    Py_DECREF(exc);
    return NULL;
}

/* ---- Conversions ------------------------------------------------------------------- */

int ppk_py_str(PyObject *o, const char *what, int allow_none, ppk_str *out, PyObject **keep) {
    *keep = NULL;
    if (o == Py_None && allow_none) {
        *out = (ppk_str){NULL, 0};
        return 0;
    }
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        const char *p = PyUnicode_AsUTF8AndSize(o, &n);
        if (p) {
            *out = (ppk_str){p, (size_t)n};
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return -1;
        /* Lone surrogates: hand their bytes over as they are; the library replaces each
         * invalid byte with U+FFFD and counts the repair. */
        PyErr_Clear();
        PyObject *b = PyUnicode_AsEncodedString(o, "utf-8", "surrogatepass");
        if (!b) return -1;
        *keep = b;
        *out = (ppk_str){PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b)};
        return 0;
    }
    if (PyBytes_Check(o)) {
        *out = (ppk_str){PyBytes_AS_STRING(o), (size_t)PyBytes_GET_SIZE(o)};
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s must be str or bytes%s, not %.80s", what,
                 allow_none ? " or None" : "", Py_TYPE(o)->tp_name);
    return -1;
}

/* o as a Python int (anything with __index__, so not a float), or NULL with TypeError. */
static PyObject *as_index(PyObject *o, const char *what) {
    if (PyLong_Check(o)) return Py_NewRef(o);
    if (!PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.80s", what,
                     Py_TYPE(o)->tp_name);
        return NULL;
    }
    return PyNumber_Index(o);
}

int ppk_py_i64(PyObject *o, const char *what, int64_t *out) {
    PyObject *i = as_index(o, what);
    if (!i) return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (overflow) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit in 64 bits", what);
        return -1;
    }
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = (int64_t)v;
    return 0;
}

int ppk_py_u64(PyObject *o, const char *what, uint64_t *out) {
    PyObject *i = as_index(o, what);
    if (!i) return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(i);
        return -1;
    }
    if (overflow < 0 || (!overflow && v < 0)) {
        Py_DECREF(i);
        PyErr_Format(PyExc_ValueError, "%s must not be negative", what);
        return -1;
    }
    if (!overflow) {
        Py_DECREF(i);
        *out = (uint64_t)v;
        return 0;
    }
    unsigned long long u = PyLong_AsUnsignedLongLong(i);
    Py_DECREF(i);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError, "%s does not fit in 64 bits", what);
        return -1;
    }
    *out = (uint64_t)u;
    return 0;
}

int ppk_py_size(PyObject *o, const char *what, size_t *out) {
    uint64_t v;
    if (ppk_py_u64(o, what, &v)) return -1;
    if (v > SIZE_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s is too large", what);
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

/* ---- Statistics as dicts ------------------------------------------------------------ */

/* A field of a statistics struct: its name, offset and type ('u' uint64_t, 'd' double,
 * 'i' int). One table per struct; a new field of the header is one line here. */
typedef struct stat_field {
    const char *name;
    size_t off;
    char type;
} stat_field;

#define U64(T, f) {#f, offsetof(T, f), 'u'}
#define DBL(T, f) {#f, offsetof(T, f), 'd'}
#define INT(T, f) {#f, offsetof(T, f), 'i'}

static const stat_field recorder_fields[] = {
    U64(ppk_recorder_stats, samples_flushed),
    U64(ppk_recorder_stats, samples_exported),
    U64(ppk_recorder_stats, windows_exported),
    U64(ppk_recorder_stats, strings),
    U64(ppk_recorder_stats, window_bytes),
    U64(ppk_recorder_stats, window_bytes_peak),
    DBL(ppk_recorder_stats, export_ms_last),
    DBL(ppk_recorder_stats, export_ms_max),
    DBL(ppk_recorder_stats, export_ms_total),
#define FIELD(name, what) U64(ppk_recorder_stats, name),
    PPK_REPAIRS(FIELD) PPK_DEGRADATIONS(FIELD)
#undef FIELD
    U64(ppk_recorder_stats, samples_dropped_nomem),
    U64(ppk_recorder_stats, samples_dropped_closed),
    U64(ppk_recorder_stats, samples_lost_export),
    U64(ppk_recorder_stats, export_failures),
    U64(ppk_recorder_stats, sink_failures),
    U64(ppk_recorder_stats, samples_lost_sink),
    U64(ppk_recorder_stats, samples_dropped_no_sink),
    U64(ppk_recorder_stats, functions),
    U64(ppk_recorder_stats, function_bytes),
    U64(ppk_recorder_stats, functions_evicted),
    U64(ppk_recorder_stats, functions_refused),
    U64(ppk_recorder_stats, samples_dropped_stale),
    U64(ppk_recorder_stats, endpoints),
};

static const stat_field profile_fields[] = {
    U64(ppk_profile_stats, samples_added),
    U64(ppk_profile_stats, samples_aggregated),
    U64(ppk_profile_stats, samples_timestamped),
    U64(ppk_profile_stats, strings),
    U64(ppk_profile_stats, string_bytes),
    U64(ppk_profile_stats, functions),
    U64(ppk_profile_stats, mappings),
    U64(ppk_profile_stats, locations),
    U64(ppk_profile_stats, stacks),
    U64(ppk_profile_stats, labels),
    U64(ppk_profile_stats, label_sets),
    U64(ppk_profile_stats, endpoints),
#define FIELD(name, what) U64(ppk_profile_stats, name),
    PPK_REPAIRS(FIELD) PPK_DEGRADATIONS(FIELD)
#undef FIELD
    U64(ppk_profile_stats, memory_bytes),
    U64(ppk_profile_stats, memory_peak_bytes),
    U64(ppk_profile_stats, memory_limit),
    U64(ppk_profile_stats, scratch_bytes),
};

static const stat_field upload_fields[] = {
    U64(ppk_upload_stats, queued),
    U64(ppk_upload_stats, sent),
    U64(ppk_upload_stats, bytes_sent),
    U64(ppk_upload_stats, attempts),
    U64(ppk_upload_stats, retries),
    U64(ppk_upload_stats, fork_restarts),
    U64(ppk_upload_stats, dropped_queue_full),
    U64(ppk_upload_stats, dropped_failed),
    U64(ppk_upload_stats, dropped_shutdown),
    U64(ppk_upload_stats, dropped_invalid),
    U64(ppk_upload_stats, dropped_nomem),
    U64(ppk_upload_stats, fail_connect),
    U64(ppk_upload_stats, fail_timeout),
    U64(ppk_upload_stats, fail_http_4xx),
    U64(ppk_upload_stats, fail_http_5xx),
    U64(ppk_upload_stats, fail_other),
    U64(ppk_upload_stats, partial_successes),
    U64(ppk_upload_stats, rejected_profiles),
    INT(ppk_upload_stats, last_http_status),
    U64(ppk_upload_stats, queue_len),
    U64(ppk_upload_stats, queue_peak),
    U64(ppk_upload_stats, memory_bytes),
    U64(ppk_upload_stats, memory_peak_bytes),
};

static PyObject *stats_dict(const void *st, const stat_field *fields, size_t n) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    const char *base = st;
    for (size_t i = 0; i < n; i++) {
        const void *p = base + fields[i].off;
        PyObject *v;
        if (fields[i].type == 'u')
            v = PyLong_FromUnsignedLongLong(*(const uint64_t *)p);
        else if (fields[i].type == 'd')
            v = PyFloat_FromDouble(*(const double *)p);
        else
            v = PyLong_FromLong(*(const int *)p);
        if (!v || PyDict_SetItemString(d, fields[i].name, v)) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

#define N_FIELDS(a) (sizeof(a) / sizeof((a)[0]))

PyObject *ppk_py_recorder_stats(const ppk_recorder_stats *st) {
    return stats_dict(st, recorder_fields, N_FIELDS(recorder_fields));
}

PyObject *ppk_py_profile_stats(const ppk_profile_stats *st) {
    return stats_dict(st, profile_fields, N_FIELDS(profile_fields));
}

PyObject *ppk_py_upload_stats(const ppk_upload_stats *st) {
    return stats_dict(st, upload_fields, N_FIELDS(upload_fields));
}

/* ---- Export: a struct sequence ----------------------------------------------------- */

PyTypeObject *ppk_py_ExportType;

static PyStructSequence_Field export_fields[] = {
    {"data", "the encoded profile (bytes, compressed with codec)"},
    {"codec", "\"gzip\", \"zstd\" or \"none\""},
    {"start_ns", "start of the window, ns since the Unix epoch"},
    {"end_ns", "end of the window (exclusive), ns since the Unix epoch"},
    {"seq", "1 for the recorder's first export, then 2, 3, ..."},
    {"stats", "the window's statistics (dict), taken before it was reset"},
    {"encode_ms", "encoding and compression time"},
    {"endpoint_counts", "the window's endpoint counts: {endpoint: count} in the order first "
                        "counted"},
    {NULL, NULL},
};

static PyStructSequence_Desc export_desc = {
    "pprofkit.Export", "One exported window of a Recorder.", export_fields, 8,
};

/* ---- Module ------------------------------------------------------------------------ */

static PyObject *mod_strerror(PyObject *self, PyObject *arg) {
    (void)self;
    int overflow = 0;
    long code = PyLong_Check(arg) ? PyLong_AsLongAndOverflow(arg, &overflow) : 0;
    if (!PyLong_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "code must be an int, not %.80s", Py_TYPE(arg)->tp_name);
        return NULL;
    }
    if (code == -1 && PyErr_Occurred()) return NULL;
    if (overflow || code < INT32_MIN || code > INT32_MAX) code = INT32_MIN;
    return PyUnicode_FromString(ppk_strerror((int)code));
}

static PyObject *mod_now_ns(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromLongLong(ppk_now_ns());
}

static PyObject *mod_before_fork(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    ppk_py_samplers_before_fork();
    Py_RETURN_NONE;
}

static PyObject *mod_after_fork_parent(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    ppk_py_samplers_after_fork_parent();
    Py_RETURN_NONE;
}

static PyObject *mod_after_fork_child(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    ppk_py_after_fork_child();
    ppk_py_samplers_after_fork_child();
    ppk_py_sigterm_after_fork_child();
    Py_RETURN_NONE;
}

static PyObject *mod_sigterm_arm(PyObject *self, PyObject *recorder) {
    (void)self;
    if (!PyObject_TypeCheck(recorder, &ppk_py_RecorderType)) {
        PyErr_SetString(PyExc_TypeError, "_sigterm_arm: a Recorder is needed");
        return NULL;
    }
    return PyBool_FromLong(ppk_py_sigterm_arm((RecorderObject *)recorder));
}

static PyObject *mod_sigterm_closing(PyObject *self, PyObject *recorder) {
    (void)self;
    if (!PyObject_TypeCheck(recorder, &ppk_py_RecorderType)) {
        PyErr_SetString(PyExc_TypeError, "_sigterm_closing: a Recorder is needed");
        return NULL;
    }
    ppk_py_sigterm_closing((RecorderObject *)recorder);
    Py_RETURN_NONE;
}

int ppk_py_thread_create(pthread_t *t, void *(*fn)(void *), void *arg) {
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

static PyObject *mod_stop_samplers(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    ppk_py_samplers_stop_all();
    Py_RETURN_NONE;
}

static PyObject *mod_hide_thread(PyObject *self, PyObject *ident) {
    (void)self;
    unsigned long v = PyLong_AsUnsignedLong(ident);
    if (v == (unsigned long)-1 && PyErr_Occurred()) return NULL;
    ppk_py_hide_thread(v);
    Py_RETURN_NONE;
}

/* The package's state is the process's (static types, one profiler, fork and exit
 * hooks), and a sampler's thread holds a thread state of the interpreter that started
 * it: in a sub-interpreter, 3.11 refuses to destroy it while that thread lives and the
 * process never exits. The package checks this at import (3.13 runs the init of a
 * module like this one in the main interpreter even for a sub-interpreter's import). */
static PyObject *mod_main_interpreter(PyObject *m, PyObject *unused) {
    (void)m, (void)unused;
    return PyBool_FromLong(PyInterpreterState_Get() == PyInterpreterState_Main());
}

static PyMethodDef module_methods[] = {
    {"strerror", mod_strerror, METH_O, "strerror(code) -> the message of a PPK_E* code"},
    {"now_ns", mod_now_ns, METH_NOARGS, "now_ns() -> CLOCK_REALTIME in ns (ppk_now_ns)"},
    {"_before_fork", mod_before_fork, METH_NOARGS,
     "Called before os.fork() (os.register_at_fork): waits until the main thread does not "
     "hand the GIL to a sampler inside a pending call (a child would inherit CPython's "
     "mark of pending calls being handled, and never run one)."},
    {"_after_fork_parent", mod_after_fork_parent, METH_NOARGS,
     "Called in the parent after os.fork(): ends what _before_fork began."},
    {"_after_fork_child", mod_after_fork_child, METH_NOARGS,
     "Called in a forked child (os.register_at_fork): forgets calls that were in progress "
     "in other threads of the parent, and the samplers' threads."},
    {"_sigterm_arm", mod_sigterm_arm, METH_O,
     "_sigterm_arm(recorder) -> whether SIGTERM now exports the recorder's last window "
     "before it kills the process (only when its disposition was the default), until "
     "the recorder is closed."},
    {"_sigterm_closing", mod_sigterm_closing, METH_O,
     "_sigterm_closing(recorder): its profiler's stop begins and writes the last window; "
     "a SIGTERM from now on waits for it (the recorder's close then kills the process)."},
    {"_hide_thread", mod_hide_thread, METH_O,
     "_hide_thread(ident): no sampler samples that thread (one of the package's own)."},
    {"_main_interpreter", mod_main_interpreter, METH_NOARGS,
     "Whether this is the main interpreter (the package refuses to load in another)."},
    {"_stop_samplers", mod_stop_samplers, METH_NOARGS,
     "Stops every running Sampler (registered with atexit: their threads must end before "
     "the interpreter finalizes)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT, "pprofkit._native",
    "The C extension of pprofkit: Recorder, Sample, UploadSink, Export and the errors.", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

/* Creates an exception class name(bases) with a docstring and adds it to the module. */
static PyObject *add_error(PyObject *m, const char *name, const char *doc, PyObject *bases) {
    char full[64];
    PyOS_snprintf(full, sizeof full, "pprofkit.%s", name);
    PyObject *t = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    if (!t) return NULL;
    if (PyModule_AddObjectRef(m, name, t)) {
        Py_DECREF(t);
        return NULL;
    }
    return t; /* the module keeps a reference too; this one stays for error_type() */
}

static int add_errors(PyObject *m) {
    Error = add_error(m, "Error",
                      "A pprofkit call failed. `code` is the PPK_E* code (negative), "
                      "`message` the library's text for it.",
                      PyExc_Exception);
    if (!Error) return -1;
    struct {
        PyObject **slot;
        const char *name, *doc;
        PyObject *builtin;
    } subs[] = {
        {&InvalidArgumentError, "InvalidArgumentError",
         "Bad input (PPK_EINVAL, ENULL, EVALUES, EDUPLABEL, ESPANID, ERESERVED, ETOOMANY, "
         "EEMPTYKEY); also a ValueError.",
         PyExc_ValueError},
        {&OutOfMemoryError, "OutOfMemoryError", "PPK_ENOMEM; also a MemoryError.",
         PyExc_MemoryError},
        {&StateError, "StateError", "PPK_ESTATE: a call out of order (e.g. flush twice).",
         NULL},
        {&ClosedError, "ClosedError", "PPK_ECLOSED: the recorder is closed or closing.",
         NULL},
        {&CompressError, "CompressError", "PPK_ECOMPRESS: compression failed.", NULL},
        {&SystemCallError, "SystemCallError",
         "PPK_ESYS: a system call failed (thread, file, directory); also an OSError.",
         PyExc_OSError},
    };
    for (size_t i = 0; i < N_FIELDS(subs); i++) {
        PyObject *bases = subs[i].builtin ? PyTuple_Pack(2, Error, subs[i].builtin)
                                          : PyTuple_Pack(1, Error);
        if (!bases) return -1;
        *subs[i].slot = add_error(m, subs[i].name, subs[i].doc, bases);
        Py_DECREF(bases);
        if (!*subs[i].slot) return -1;
    }
    return 0;
}

static int add_codes(PyObject *m) {
#define PPK_PY_ADD_CODE_(name, value, msg)                                                 \
    if (PyModule_AddIntConstant(m, #name, value)) return -1;
    PPK_ERROR_LIST(PPK_PY_ADD_CODE_)
#undef PPK_PY_ADD_CODE_
    return 0;
}

/* A tuple of the names (NULL: an exception). */
static PyObject *names_tuple(const char *const *names, Py_ssize_t n) {
    PyObject *t = PyTuple_New(n);
    for (Py_ssize_t i = 0; t && i < n; i++) {
        PyObject *s = PyUnicode_FromString(names[i]);
        if (!s) Py_CLEAR(t);
        else PyTuple_SET_ITEM(t, i, s);
    }
    return t;
}

/* REPAIRS and DEGRADATIONS: the names of those counters in the stats dicts. */
static int add_counter_names(PyObject *m) {
#define NAME(name, what) #name,
    static const char *const repairs[] = {PPK_REPAIRS(NAME)};
    static const char *const degradations[] = {PPK_DEGRADATIONS(NAME)};
#undef NAME
    PyObject *r = names_tuple(repairs, sizeof repairs / sizeof *repairs);
    PyObject *d = names_tuple(degradations, sizeof degradations / sizeof *degradations);
    int rc = !r || !d || PyModule_AddObjectRef(m, "REPAIRS", r) ||
             PyModule_AddObjectRef(m, "DEGRADATIONS", d);
    Py_XDECREF(r);
    Py_XDECREF(d);
    return rc ? -1 : 0;
}

PyMODINIT_FUNC PyInit__native(void) {
    if (ppk_py_recorder_ready() || ppk_py_sample_ready() || ppk_py_sampler_ready()) return NULL;
    PyObject *m = PyModule_Create(&native_module);
    if (!m) return NULL;
    if (!ppk_py_ExportType) ppk_py_ExportType = PyStructSequence_NewType(&export_desc);
    if (!ppk_py_ExportType || add_errors(m) || add_codes(m) || add_counter_names(m) ||
        PyModule_AddObjectRef(m, "Export", (PyObject *)ppk_py_ExportType) ||
        PyModule_AddObjectRef(m, "Recorder", (PyObject *)&ppk_py_RecorderType) ||
        PyModule_AddObjectRef(m, "Sample", (PyObject *)&ppk_py_SampleType) ||
        PyModule_AddObjectRef(m, "UploadSink", (PyObject *)&ppk_py_UploadSinkType) ||
        PyModule_AddObjectRef(m, "Sampler", (PyObject *)&ppk_py_SamplerType) ||
        PyModule_AddStringConstant(m, "VERSION", PPK_VERSION_STRING)) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
