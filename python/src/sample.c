/*
 * sample.c - pprofkit.Sample, a sample builder (ppk_sample) of one Recorder.
 *
 * A builder is meant for one thread. Its calls keep the GIL (a flush takes a shard lock
 * only for the in-memory insert, and no holder of a pprofkit lock ever waits for the
 * GIL), so calls on one builder from several Python threads are serialized and cannot
 * corrupt it: at worst they interleave samples and get StateError. Strings are handed to
 * the library as UTF-8 without a copy (PyUnicode_AsUTF8AndSize); the library copies them
 * at push.
 *
 * record() builds a whole sample from Python objects in one call, the fast path for a
 * profiler written in Python: frames, values, labels, timestamp; on any error the sample
 * is dropped and nothing is recorded.
 */
#include "binding.h"

static PyObject *Sample_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"recorder", NULL};
    PyObject *rec_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!", kwlist, &ppk_py_RecorderType, &rec_obj))
        return NULL;
    RecorderObject *r = (RecorderObject *)rec_obj;
    if (ppk_py_recorder_check_open(r)) return NULL;
    SampleObject *self = (SampleObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->recorder = (RecorderObject *)Py_NewRef(r);
    int rc = ppk_sample_create(r->rec, &self->s);
    if (rc) {
        Py_DECREF(self);
        return ppk_py_error(rc, "Sample", NULL);
    }
    return (PyObject *)self;
}

static void Sample_dealloc(SampleObject *self) {
    ppk_sample_free(self->s);
    Py_XDECREF(self->recorder);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The builder, or NULL with ClosedError once close() was called on it. Fetched after
 * the arguments are converted: a conversion may run Python code (__index__, a
 * sequence's iterator) that closes this Sample from another thread. */
static ppk_sample *builder(SampleObject *self, const char *what) {
    if (!self->s || self->close_pending) {
        ppk_py_error(PPK_ECLOSED, what, "the Sample is closed");
        return NULL;
    }
    return self->s;
}

static PyObject *result(int rc, const char *what) {
    if (rc) return ppk_py_error(rc, what, NULL);
    Py_RETURN_NONE;
}

static int check_nargs(Py_ssize_t n, Py_ssize_t lo, Py_ssize_t hi, const char *what) {
    if (n >= lo && n <= hi) return 0;
    if (lo == hi)
        PyErr_Format(PyExc_TypeError, "%s takes %zd positional arguments (%zd given)", what,
                     lo, n);
    else
        PyErr_Format(PyExc_TypeError, "%s takes %zd to %zd positional arguments (%zd given)",
                     what, lo, hi, n);
    return -1;
}

/* ---- One frame, one label: shared by the builder calls and record() ----------------- */

/* name, filename (str, bytes or None), line (int). */
static int push_frame(SampleObject *self, PyObject *name_obj, PyObject *file_obj,
                      PyObject *line_obj, const char *what) {
    ppk_str name, file;
    PyObject *kn = NULL, *kf = NULL;
    int64_t line = 0;
    if (ppk_py_str(name_obj, "a frame's name", 0, &name, &kn)) return -1;
    int rc = -1;
    if (ppk_py_str(file_obj ? file_obj : Py_None, "a frame's filename", 1, &file, &kf) ||
        (line_obj && line_obj != Py_None && ppk_py_i64(line_obj, "a frame's line", &line)))
        goto out;
    ppk_sample *s = builder(self, what);
    if (!s) goto out;
    rc = ppk_sample_push_frame(s, name, file, line, 0);
    if (rc) ppk_py_error(rc, what, NULL);
out:
    Py_XDECREF(kn);
    Py_XDECREF(kf);
    return rc ? -1 : 0;
}

/* key (str or bytes); value: str or bytes (a string label) or int (a numeric label, with
 * an optional unit). */
static int push_label(SampleObject *self, PyObject *key_obj, PyObject *value,
                      PyObject *unit_obj, const char *what) {
    ppk_str key, str, unit = {NULL, 0};
    PyObject *kk = NULL, *kv = NULL, *ku = NULL;
    int rc = -1;
    ppk_sample *s;
    if (ppk_py_str(key_obj, "a label key", 0, &key, &kk)) return -1;
    if (PyUnicode_Check(value) || PyBytes_Check(value)) {
        if (unit_obj && unit_obj != Py_None) {
            PyErr_SetString(PyExc_TypeError, "a unit is for numeric labels only");
            goto out;
        }
        if (ppk_py_str(value, "a label value", 0, &str, &kv) || !(s = builder(self, what)))
            goto out;
        rc = ppk_sample_push_label_str(s, key, str);
    } else if (PyLong_Check(value)) {
        int64_t num;
        if (ppk_py_i64(value, "a numeric label value", &num) ||
            ppk_py_str(unit_obj ? unit_obj : Py_None, "a label unit", 1, &unit, &ku) ||
            !(s = builder(self, what)))
            goto out;
        rc = ppk_sample_push_label_num(s, key, num, unit);
    } else {
        PyErr_Format(PyExc_TypeError, "a label value must be str, bytes or int, not %.80s",
                     Py_TYPE(value)->tp_name);
        goto out;
    }
    if (rc) ppk_py_error(rc, what, NULL);
out:
    Py_XDECREF(kk);
    Py_XDECREF(kv);
    Py_XDECREF(ku);
    return rc ? -1 : 0;
}

/* ---- Builder calls ----------------------------------------------------------------- */

static PyObject *Sample_start(SampleObject *self, PyObject *unused) {
    (void)unused;
    ppk_sample *s = builder(self, "Sample.start");
    return s ? result(ppk_sample_start(s), "Sample.start") : NULL;
}

static PyObject *Sample_push_frame(SampleObject *self, PyObject *const *args, Py_ssize_t n) {
    if (check_nargs(n, 1, 3, "push_frame")) return NULL;
    if (push_frame(self, args[0], n > 1 ? args[1] : NULL, n > 2 ? args[2] : NULL,
                   "Sample.push_frame"))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Sample_push_label(SampleObject *self, PyObject *const *args, Py_ssize_t n) {
    if (check_nargs(n, 2, 3, "push_label")) return NULL;
    if (push_label(self, args[0], args[1], n > 2 ? args[2] : NULL, "Sample.push_label"))
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *Sample_set_value(SampleObject *self, PyObject *const *args, Py_ssize_t n) {
    if (check_nargs(n, 2, 2, "set_value")) return NULL;
    size_t idx;
    int64_t v;
    if (ppk_py_size(args[0], "index", &idx) || ppk_py_i64(args[1], "value", &v)) return NULL;
    ppk_sample *s = builder(self, "Sample.set_value");
    if (!s) return NULL;
    return result(ppk_sample_set_value(s, idx, v), "Sample.set_value");
}

/* Item i of a PySequence_Fast result as a new reference, or NULL with RuntimeError if
 * the list shrank below i + 1. PySequence_Fast returns a list itself, not a copy, and
 * converting an item may run Python code (__index__, __iter__) that changes the list:
 * loops fetch each item this way, never through a saved PySequence_Fast_ITEMS pointer. */
static PyObject *fast_item(PyObject *seq, Py_ssize_t i, const char *what) {
    if (i < PySequence_Fast_GET_SIZE(seq)) return Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
    PyErr_Format(PyExc_RuntimeError, "%s changed size during the call", what);
    return NULL;
}

/* A sequence of at most `max` ints into values[]; returns the count or -1. */
static Py_ssize_t parse_values(PyObject *o, int64_t *values, size_t max) {
    PyObject *seq = PySequence_Fast(o, "values must be a sequence of int");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if ((size_t)n > max) {
        Py_DECREF(seq);
        ppk_py_error(PPK_EVALUES, "values", NULL);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = fast_item(seq, i, "values");
        int rc = item ? ppk_py_i64(item, "a value", &values[i]) : -1;
        Py_XDECREF(item);
        if (rc) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return n;
}

static PyObject *Sample_set_values(SampleObject *self, PyObject *arg) {
    int64_t values[PPK_MAX_SAMPLE_TYPES];
    Py_ssize_t n = parse_values(arg, values, PPK_MAX_SAMPLE_TYPES);
    if (n < 0) return NULL;
    ppk_sample *s = builder(self, "Sample.set_values");
    if (!s) return NULL;
    return result(ppk_sample_set_values(s, values, (size_t)n), "Sample.set_values");
}

static PyObject *Sample_set_timestamp(SampleObject *self, PyObject *arg) {
    int64_t ns;
    if (ppk_py_i64(arg, "timestamp_ns", &ns)) return NULL;
    ppk_sample *s = builder(self, "Sample.set_timestamp");
    if (!s) return NULL;
    return result(ppk_sample_set_timestamp(s, ns), "Sample.set_timestamp");
}

static PyObject *Sample_flush(SampleObject *self, PyObject *unused) {
    (void)unused;
    ppk_sample *s = builder(self, "Sample.flush");
    return s ? result(ppk_sample_flush(s), "Sample.flush") : NULL;
}

static PyObject *Sample_drop(SampleObject *self, PyObject *unused) {
    (void)unused;
    ppk_sample *s = builder(self, "Sample.drop");
    return s ? result(ppk_sample_drop(s), "Sample.drop") : NULL;
}

static PyObject *Sample_close(SampleObject *self, PyObject *unused) {
    (void)unused;
    if (self->busy) {
        self->close_pending = 1; /* the record() in progress frees it when it ends */
    } else {
        ppk_sample_free(self->s);
        self->s = NULL;
    }
    Py_RETURN_NONE;
}

/* ---- record(): a whole sample in one call ------------------------------------------ */

static int record_frames(SampleObject *self, PyObject *frames) {
    PyObject *seq = PySequence_Fast(frames, "frames must be a sequence of tuples");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *f = fast_item(seq, i, "frames");
        if (!f) {
            Py_DECREF(seq);
            return -1;
        }
        PyObject *fs = PyTuple_Check(f) ? Py_NewRef(f) : NULL;
        if (!fs && (PyUnicode_Check(f) || PyBytes_Check(f) || !PySequence_Check(f))) {
            PyErr_Format(PyExc_TypeError,
                         "a frame must be a (name, filename, line) tuple, not %.80s",
                         Py_TYPE(f)->tp_name);
            Py_DECREF(f);
            Py_DECREF(seq);
            return -1;
        }
        if (!fs) fs = PySequence_Tuple(f);
        Py_DECREF(f);
        if (!fs) {
            Py_DECREF(seq);
            return -1;
        }
        Py_ssize_t k = PyTuple_GET_SIZE(fs);
        int rc = check_nargs(k, 1, 3, "a frame tuple");
        if (!rc)
            rc = push_frame(self, PyTuple_GET_ITEM(fs, 0), k > 1 ? PyTuple_GET_ITEM(fs, 1) : NULL,
                            k > 2 ? PyTuple_GET_ITEM(fs, 2) : NULL, "Sample.record");
        Py_DECREF(fs);
        if (rc) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static int record_labels(SampleObject *self, PyObject *labels) {
    if (!labels || labels == Py_None) return 0;
    if (PyDict_Check(labels)) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(labels, &pos, &k, &v)) {
            Py_INCREF(k);
            Py_INCREF(v);
            int rc = push_label(self, k, v, NULL, "Sample.record");
            Py_DECREF(k);
            Py_DECREF(v);
            if (rc) return -1;
        }
        return 0;
    }
    PyObject *seq = PySequence_Fast(labels, "labels must be a dict or a sequence of pairs");
    if (!seq) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = fast_item(seq, i, "labels");
        PyObject *pair = item ? PySequence_Fast(item, "a label must be a (key, value) pair")
                              : NULL;
        Py_XDECREF(item);
        if (!pair) {
            Py_DECREF(seq);
            return -1;
        }
        Py_ssize_t k = PySequence_Fast_GET_SIZE(pair);
        int rc = check_nargs(k, 2, 3, "a label tuple");
        if (!rc)
            rc = push_label(self, PySequence_Fast_GET_ITEM(pair, 0),
                            PySequence_Fast_GET_ITEM(pair, 1),
                            k > 2 ? PySequence_Fast_GET_ITEM(pair, 2) : NULL, "Sample.record");
        Py_DECREF(pair);
        if (rc) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *Sample_record(SampleObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"frames", "values", "labels", "timestamp_ns", NULL};
    PyObject *frames, *values_obj, *labels = NULL, *ts_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|OO", kwlist, &frames, &values_obj,
                                     &labels, &ts_obj))
        return NULL;
    int64_t values[PPK_MAX_SAMPLE_TYPES];
    int64_t ts = 0;
    Py_ssize_t nv = parse_values(values_obj, values, PPK_MAX_SAMPLE_TYPES);
    if (nv < 0 || (ts_obj && ts_obj != Py_None && ppk_py_i64(ts_obj, "timestamp_ns", &ts)))
        return NULL;
    ppk_sample *s = builder(self, "Sample.record");
    if (!s) return NULL;
    int rc = ppk_sample_start(s);
    if (rc) return ppk_py_error(rc, "Sample.record", NULL);
    /* Converting frames and labels may run Python code (a sequence's iterator, a str
     * subclass), which may switch threads: `busy` keeps `s` allocated if another thread
     * closes this Sample meanwhile, and any error drops the sample. */
    self->busy++;
    if (record_frames(self, frames) || record_labels(self, labels) ||
        !builder(self, "Sample.record"))
        goto drop;
    rc = ppk_sample_set_values(s, values, (size_t)nv);
    if (!rc && ts) rc = ppk_sample_set_timestamp(s, ts);
    if (!rc) rc = ppk_sample_flush(s);
    if (rc) {
        ppk_py_error(rc, "Sample.record", NULL);
        goto drop;
    }
    self->busy--;
    Py_RETURN_NONE;
drop:
    ppk_sample_drop(s); /* PPK_ESTATE if the failure ended the sample already */
    if (--self->busy == 0 && self->close_pending) {
        ppk_sample_free(self->s);
        self->s = NULL;
    }
    return NULL;
}

static PyObject *Sample_enter(SampleObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *Sample_exit(SampleObject *self, PyObject *args) {
    (void)args;
    Sample_close(self, NULL);
    Py_RETURN_FALSE;
}

static PyObject *Sample_get_recorder(SampleObject *self, void *closure) {
    (void)closure;
    return Py_NewRef(self->recorder);
}

static PyGetSetDef Sample_getset[] = {
    {"recorder", (getter)Sample_get_recorder, NULL, "the Recorder it flushes into", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Sample_methods[] = {
    {"start", (PyCFunction)Sample_start, METH_NOARGS,
     "start(): begins a sample (no frames, no labels, values 0)."},
    {"push_frame", (PyCFunction)(void (*)(void))Sample_push_frame, METH_FASTCALL,
     "push_frame(name, filename=None, line=0, /): the next frame, leaf first."},
    {"push_label", (PyCFunction)(void (*)(void))Sample_push_label, METH_FASTCALL,
     "push_label(key, value, unit=None, /): a str or bytes value, or an int (with an "
     "optional unit)."},
    {"set_value", (PyCFunction)(void (*)(void))Sample_set_value, METH_FASTCALL,
     "set_value(index, value, /): the value of sample type `index`."},
    {"set_values", (PyCFunction)Sample_set_values, METH_O,
     "set_values(values, /): the first len(values) values."},
    {"set_timestamp", (PyCFunction)Sample_set_timestamp, METH_O,
     "set_timestamp(ns, /): keep this sample on its own, with this end time; 0 undoes it."},
    {"flush", (PyCFunction)Sample_flush, METH_NOARGS,
     "flush(): records the sample in the recorder's active window and ends it."},
    {"drop", (PyCFunction)Sample_drop, METH_NOARGS, "drop(): ends the sample unrecorded."},
    {"record", (PyCFunction)(void (*)(void))Sample_record, METH_VARARGS | METH_KEYWORDS,
     "record(frames, values, labels=None, timestamp_ns=0): start, push every frame "
     "((name, filename, line) tuples, leaf first) and label (a dict, or (key, value[, "
     "unit]) pairs), set the values and the timestamp, flush: one call. On error nothing "
     "is recorded."},
    {"close", (PyCFunction)Sample_close, METH_NOARGS,
     "close(): frees the builder now (an unfinished sample is dropped)."},
    {"__enter__", (PyCFunction)Sample_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Sample_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ppk_py_SampleType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pprofkit.Sample",
    .tp_basicsize = sizeof(SampleObject),
    .tp_dealloc = (destructor)Sample_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sample(recorder)\n\nA sample builder (ppk_sample) for one thread: start, "
              "push frames and labels, set values, flush; or record() in one call.",
    .tp_methods = Sample_methods,
    .tp_getset = Sample_getset,
    .tp_new = Sample_new,
};

int ppk_py_sample_ready(void) { return PyType_Ready(&ppk_py_SampleType); }
