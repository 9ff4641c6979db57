/*
 * recorder.c - pprofkit.Recorder (a ppk_recorder): creation, exports, statistics,
 * endpoints, close; its sinks are in sinks.c.
 *
 * Lifetime. ppk_recorder_free must not overlap any other call on the recorder or its
 * builders. Builder calls (sample.c) and the short recorder calls keep the GIL; the
 * calls that release it count themselves in `busy` (atomic: a Sampler counts its
 * recording phase there, without the GIL). close() refuses new recorder calls, stops
 * the exporter, exports the last window to the sinks and drains the upload sinks with
 * the GIL released, then waits until `busy` is 0 and frees the recorder with the GIL
 * held: nothing else can run on it then. Samples keep a strong
 * reference to their recorder and learn that it is gone from the library (PPK_ECLOSED).
 *
 * Fork. The library empties a child's recorders. Calls that other threads had in
 * progress at the fork do not exist in the child: _after_fork_child (registered with
 * os.register_at_fork by the package) forgets them.
 */
#include "binding.h"

#include <stddef.h>
#include <string.h>
#include <time.h>

/* Every open recorder (GIL-protected), for the fork handler. */
static RecorderObject *live;

static void live_add(RecorderObject *r) {
    r->prev_live = NULL;
    r->next_live = live;
    if (live) live->prev_live = r;
    live = r;
}

static void live_remove(RecorderObject *r) {
    if (r->prev_live) r->prev_live->next_live = r->next_live;
    else if (live == r) live = r->next_live;
    if (r->next_live) r->next_live->prev_live = r->prev_live;
    r->next_live = r->prev_live = NULL;
}

void ppk_py_after_fork_child(void) {
    for (RecorderObject *r = live; r; r = r->next_live) {
        atomic_store(&r->busy, 0);
        r->closing = 0;
    }
}

int ppk_py_recorder_check_open(RecorderObject *r) {
    if (r->rec && !r->closing) return 0;
    ppk_py_error(PPK_ECLOSED, "Recorder", NULL);
    return -1;
}

/* Sleeps 1 ms with the GIL released. */
static void nap(void) {
    struct timespec ts = {0, 1000000};
    PyThreadState *save = PyEval_SaveThread();
    nanosleep(&ts, NULL);
    PyEval_RestoreThread(save);
}

/* ---- Creation ---------------------------------------------------------------------- */

static const char *const codec_names[] = {"gzip", "zstd", "none"};

static int parse_codec(PyObject *o, ppk_codec *out) {
    if (!o || o == Py_None) return 0;
    if (PyUnicode_Check(o)) {
        for (int i = 0; i < 3; i++) {
            if (PyUnicode_CompareWithASCIIString(o, codec_names[i]) == 0) {
                *out = (ppk_codec)i;
                return 0;
            }
        }
    }
    PyErr_Format(PyExc_ValueError, "codec must be \"gzip\", \"zstd\" or \"none\", not %R", o);
    return -1;
}

/* Optional numeric arguments: None or absent leaves the default. */
static int opt_size(PyObject *o, const char *what, size_t *out) {
    return (!o || o == Py_None) ? 0 : ppk_py_size(o, what, out);
}

static int opt_i64(PyObject *o, const char *what, int64_t *out) {
    return (!o || o == Py_None) ? 0 : ppk_py_i64(o, what, out);
}

/* A (type, unit) pair into *vt; the strings are kept alive by `keeps` (a list). */
static int parse_value_type(PyObject *o, const char *what, ppk_value_type *vt,
                            PyObject *keeps, PyObject **norm) {
    PyObject *seq = PySequence_Check(o) && !PyUnicode_Check(o) && !PyBytes_Check(o)
                        ? PySequence_Tuple(o)
                        : NULL;
    if (!seq || PyTuple_GET_SIZE(seq) != 2 || !PyUnicode_Check(PyTuple_GET_ITEM(seq, 0)) ||
        !PyUnicode_Check(PyTuple_GET_ITEM(seq, 1))) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a (type, unit) pair of str, not %R", what, o);
        return -1;
    }
    ppk_str *parts[2] = {&vt->type, &vt->unit};
    for (int i = 0; i < 2; i++) {
        PyObject *keep;
        if (ppk_py_str(PyTuple_GET_ITEM(seq, i), what, 0, parts[i], &keep)) {
            Py_DECREF(seq);
            return -1;
        }
        if (keep) {
            int rc = PyList_Append(keeps, keep);
            Py_DECREF(keep);
            if (rc) {
                Py_DECREF(seq);
                return -1;
            }
        }
    }
    if (PyList_Append(keeps, seq)) {
        Py_DECREF(seq);
        return -1;
    }
    *norm = seq;
    return 0;
}

/* Recorder()'s sample types as a tuple of normalized (type, unit) pairs, set in pc.
 * NULL with an exception. */
static PyObject *parse_sample_types(PyObject *types, ppk_profile_config *pc, PyObject *keeps) {
    /* A tuple, not PySequence_Fast: parsing a pair may run Python code (its __iter__)
     * that changes a list given here. */
    PyObject *tseq = PySequence_Check(types) && !PyUnicode_Check(types)
                         ? PySequence_Tuple(types)
                         : NULL;
    if (!tseq) {
        /* Not a sequence; an exception of its own iterator goes through as it is. */
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError,
                            "sample_types must be a sequence of (type, unit) pairs");
        }
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(tseq);
    PyObject *norm_types = NULL;
    if (n < 1 || n > PPK_MAX_SAMPLE_TYPES)
        PyErr_Format(PyExc_ValueError, "sample_types must have 1 to %d pairs, not %zd",
                     PPK_MAX_SAMPLE_TYPES, n);
    else
        norm_types = PyTuple_New(n);
    for (Py_ssize_t i = 0; norm_types && i < n; i++) {
        PyObject *norm;
        if (parse_value_type(PyTuple_GET_ITEM(tseq, i), "a sample type", &pc->sample_types[i],
                             keeps, &norm))
            Py_CLEAR(norm_types);
        else
            PyTuple_SET_ITEM(norm_types, i, norm); /* steals the reference from parse */
    }
    Py_DECREF(tseq);
    if (norm_types) pc->n_sample_types = (size_t)n;
    return norm_types;
}

/* Recorder()'s keyword options, in kwlist's order after sample_types. */
enum { O_PERIOD, O_PERIOD_TYPE, O_EXPORT_PERIOD, O_MEMORY_LIMIT, O_CHUNK_SIZE, O_KEEP_BYTES,
       O_MAX_STRING, O_MAX_FRAMES, O_MAX_LABELS, O_SHARDS, O_OUT_DIR, O_NAME, O_CODEC, O_LEVEL,
       O_BKEEP, O_BMAX, N_OPTIONS };

/* The options (NULL: not given) into cfg; the strings cfg points to are kept alive by
 * `keeps`. -1 with an exception. */
static int parse_options(PyObject *const *o, ppk_recorder_config *cfg, PyObject *keeps) {
    ppk_profile_config *pc = &cfg->profile;
    if (o[O_PERIOD_TYPE] && o[O_PERIOD_TYPE] != Py_None) {
        PyObject *norm;
        if (parse_value_type(o[O_PERIOD_TYPE], "period_type", &pc->period_type, keeps, &norm))
            return -1;
        Py_DECREF(norm); /* `keeps` holds it */
    }
    int64_t level = 0;
    if (opt_i64(o[O_PERIOD], "period", &pc->period) ||
        opt_i64(o[O_EXPORT_PERIOD], "export_period_ms", &cfg->export_period_ms) ||
        opt_size(o[O_MEMORY_LIMIT], "memory_limit", &pc->memory_limit) ||
        opt_size(o[O_CHUNK_SIZE], "chunk_size", &pc->chunk_size) ||
        opt_size(o[O_KEEP_BYTES], "keep_bytes", &pc->keep_bytes) ||
        opt_size(o[O_MAX_STRING], "max_string_len", &pc->max_string_len) ||
        opt_size(o[O_MAX_FRAMES], "max_frames", &pc->max_frames) ||
        opt_size(o[O_MAX_LABELS], "max_labels", &pc->max_labels) ||
        opt_size(o[O_SHARDS], "shards", &cfg->shards) ||
        opt_size(o[O_BKEEP], "builder_keep_bytes", &cfg->builder_keep_bytes) ||
        opt_size(o[O_BMAX], "builder_max_bytes", &cfg->builder_max_bytes) ||
        opt_i64(o[O_LEVEL], "level", &level) || parse_codec(o[O_CODEC], &cfg->codec))
        return -1;
    if (level < -1000 || level > 1000) {
        PyErr_SetString(PyExc_ValueError, "level must be between -1000 and 1000");
        return -1;
    }
    cfg->level = (int)level;
    static const char *const str_names[2] = {"out_dir", "name"};
    PyObject *strs[2] = {o[O_OUT_DIR], o[O_NAME]};
    ppk_str *dests[2] = {&cfg->out_dir, &cfg->name};
    for (int i = 0; i < 2; i++) {
        PyObject *keep;
        if (ppk_py_str(strs[i] ? strs[i] : Py_None, str_names[i], 1, dests[i], &keep))
            return -1;
        int rc = keep ? PyList_Append(keeps, keep) : 0;
        Py_XDECREF(keep);
        if (rc) return -1;
    }
    return 0;
}

static PyObject *Recorder_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sample_types", "period", "period_type", "export_period_ms",
                             "memory_limit", "chunk_size", "keep_bytes", "max_string_len",
                             "max_frames", "max_labels", "shards", "out_dir", "name", "codec",
                             "level", "builder_keep_bytes", "builder_max_bytes", NULL};
    PyObject *types = NULL, *o[N_OPTIONS] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|$OOOOOOOOOOOOOOOO", kwlist, &types,
                                     &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7],
                                     &o[8], &o[9], &o[10], &o[11], &o[12], &o[13], &o[14],
                                     &o[15]))
        return NULL;
    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    PyObject *keeps = PyList_New(0);
    if (!keeps) return NULL;
    RecorderObject *self = NULL;
    PyObject *norm_types = parse_sample_types(types, &cfg.profile, keeps);
    if (!norm_types || parse_options(o, &cfg, keeps)) goto fail;

    self = (RecorderObject *)type->tp_alloc(type, 0);
    if (!self) goto fail;
    self->n_values = cfg.profile.n_sample_types;
    self->max_string_len = cfg.profile.max_string_len;
    self->max_frames = cfg.profile.max_frames;
    self->codec = cfg.codec;
    self->has_sinks = cfg.out_dir.len > 0;
    self->sample_types = norm_types;
    norm_types = NULL;
    int rc = ppk_recorder_create(&cfg, &self->rec);
    if (rc) {
        ppk_py_error(rc, "Recorder", NULL);
        goto fail;
    }
    live_add(self);
    Py_DECREF(keeps);
    return (PyObject *)self;

fail:
    Py_XDECREF(norm_types);
    Py_XDECREF((PyObject *)self);
    Py_DECREF(keeps);
    return NULL;
}

/* ---- Closing ----------------------------------------------------------------------- */

void ppk_py_last_window(ppk_recorder *rec, int has_sinks, const ppk_sink *uploads,
                        size_t n_uploads) {
    ppk_recorder_stop(rec);
    /* What a running exporter's last export did not take (it was not running, or
     * samples came since) goes to the sinks here: no empty file, unless an export made
     * at the same time (sigterm.c's) took those samples first. */
    ppk_recorder_stats st;
    ppk_recorder_stats_get(rec, &st);
    if (has_sinks && st.samples_flushed > st.samples_exported + st.samples_lost_export)
        ppk_recorder_export(rec, NULL);
    ppk_sinks_upload_shutdown(uploads, n_uploads);
}

/* Stops, exports the last window to the sinks, drains the uploads and frees. */
static void recorder_close(RecorderObject *self) {
    if (!self->rec) return;
    if (self->closing) {
        /* Another thread is closing it: wait until it is done. */
        while (self->rec && self->closing) nap();
        return;
    }
    self->closing = 1;
    ppk_py_sigterm_closing(self);
    ppk_recorder *rec = self->rec;
    int has_sinks = self->has_sinks;
    size_t n_uploads = self->n_uploads;
    ppk_sink uploads[PPK_PY_MAX_UPLOADS];
    memcpy(uploads, self->uploads, n_uploads * sizeof *uploads);
    PPK_PY_NOGIL(self, ppk_py_last_window(rec, has_sinks, uploads, n_uploads));
    while (atomic_load(&self->busy) > 0) nap();
    /* The GIL is held from here on: no builder call, no other recorder call runs. What
     * was flushed since the export above is exported (or counted) by the free. */
    if (!self->rec) return; /* a fork child's handler cannot free it; defensive */
    /* A SIGTERM that came meanwhile kills the process here. */
    PyObject *armed = ppk_py_sigterm_disarm(self);
    live_remove(self);
    self->rec = NULL;
    ppk_recorder_free(rec);
    self->closing = 0;
    Py_XDECREF(armed);
}

static void Recorder_dealloc(RecorderObject *self) {
    /* No call is in progress: each would hold a reference. */
    if (self->weakrefs) PyObject_ClearWeakRefs((PyObject *)self);
    recorder_close(self);
    Py_XDECREF(self->sample_types);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Recorder_close(RecorderObject *self, PyObject *unused) {
    (void)unused;
    recorder_close(self);
    Py_RETURN_NONE;
}

static PyObject *Recorder_seal(RecorderObject *self, PyObject *unused) {
    (void)unused;
    if (ppk_py_recorder_check_open(self)) return NULL;
    PPK_PY_NOGIL(self, ppk_recorder_seal(self->rec));
    Py_RETURN_NONE;
}

static PyObject *Recorder_enter(RecorderObject *self, PyObject *unused) {
    (void)unused;
    if (ppk_py_recorder_check_open(self)) return NULL;
    return Py_NewRef(self);
}

static PyObject *Recorder_exit(RecorderObject *self, PyObject *args) {
    (void)args;
    recorder_close(self);
    Py_RETURN_FALSE;
}

/* ---- Exporting --------------------------------------------------------------------- */

static PyObject *Recorder_start(RecorderObject *self, PyObject *unused) {
    (void)unused;
    if (ppk_py_recorder_check_open(self)) return NULL;
    int rc;
    PPK_PY_NOGIL(self, rc = ppk_recorder_start(self->rec));
    if (rc) return ppk_py_error(rc, "Recorder.start", NULL);
    Py_RETURN_NONE;
}

static PyObject *Recorder_stop(RecorderObject *self, PyObject *unused) {
    (void)unused;
    if (ppk_py_recorder_check_open(self)) return NULL;
    PPK_PY_NOGIL(self, ppk_recorder_stop(self->rec));
    Py_RETURN_NONE;
}

static PyObject *Recorder_shutdown_uploads(RecorderObject *self, PyObject *unused) {
    (void)unused;
    if (ppk_py_recorder_check_open(self)) return NULL;
    size_t n = self->n_uploads;
    ppk_sink uploads[PPK_PY_MAX_UPLOADS];
    memcpy(uploads, self->uploads, n * sizeof *uploads);
    PPK_PY_NOGIL(self, ppk_sinks_upload_shutdown(uploads, n));
    Py_RETURN_NONE;
}

/* {endpoint: count}; the strings are valid UTF-8 (the window repaired them). */
static PyObject *endpoint_counts(const ppk_export *e) {
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < e->n_endpoint_counts; i++) {
        const ppk_endpoint_count *c = &e->endpoint_counts[i];
        PyObject *k = PyUnicode_DecodeUTF8(c->endpoint.ptr, (Py_ssize_t)c->endpoint.len,
                                           "replace");
        PyObject *v = PyLong_FromLongLong(c->count);
        if (!k || !v || PyDict_SetItem(d, k, v)) Py_CLEAR(d);
        Py_XDECREF(k);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *export_object(const ppk_export *e) {
    PyObject *ex = PyStructSequence_New(ppk_py_ExportType);
    if (!ex) return NULL;
    PyObject *items[8] = {
        PyBytes_FromStringAndSize((const char *)e->data.data, (Py_ssize_t)e->data.len),
        PyUnicode_FromString(codec_names[e->codec <= PPK_CODEC_NONE ? e->codec : 0]),
        PyLong_FromLongLong(e->start_ns),
        PyLong_FromLongLong(e->end_ns),
        PyLong_FromUnsignedLongLong(e->seq),
        ppk_py_profile_stats(&e->stats),
        PyFloat_FromDouble(e->encode_ms),
        endpoint_counts(e),
    };
    int ok = 1;
    for (int i = 0; i < 8; i++) {
        if (!items[i]) ok = 0;
        PyStructSequence_SET_ITEM(ex, i, items[i] ? items[i] : Py_NewRef(Py_None));
    }
    if (!ok) {
        Py_DECREF(ex);
        return NULL;
    }
    return ex;
}

static PyObject *Recorder_export(RecorderObject *self, PyObject *unused) {
    (void)unused;
    if (ppk_py_recorder_check_open(self)) return NULL;
    ppk_export e;
    memset(&e, 0, sizeof e);
    int rc;
    PPK_PY_NOGIL(self, rc = ppk_recorder_export(self->rec, &e));
    if (rc) return ppk_py_error(rc, "Recorder.export", NULL);
    PyObject *ex = export_object(&e);
    ppk_export_free(&e);
    return ex;
}

static PyObject *Recorder_export_to_sinks(RecorderObject *self, PyObject *unused) {
    (void)unused;
    if (ppk_py_recorder_check_open(self)) return NULL;
    int rc;
    PPK_PY_NOGIL(self, rc = ppk_recorder_export(self->rec, NULL));
    if (rc) return ppk_py_error(rc, "Recorder.export_to_sinks", NULL);
    Py_RETURN_NONE;
}

static PyObject *Recorder_stats(RecorderObject *self, PyObject *unused) {
    (void)unused;
    if (ppk_py_recorder_check_open(self)) return NULL;
    ppk_recorder_stats st;
    PPK_PY_NOGIL(self, ppk_recorder_stats_get(self->rec, &st));
    return ppk_py_recorder_stats(&st);
}

/* ---- Endpoints --------------------------------------------------------------------- */

static PyObject *Recorder_set_endpoint(RecorderObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"local_root_span_id", "endpoint", NULL};
    PyObject *id_obj, *ep_obj;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO", kwlist, &id_obj, &ep_obj)) return NULL;
    uint64_t id;
    ppk_str ep;
    PyObject *keep;
    if (ppk_py_u64(id_obj, "local_root_span_id", &id) ||
        ppk_py_str(ep_obj, "endpoint", 0, &ep, &keep))
        return NULL;
    /* Checked after the conversions: __index__ may have closed the recorder. */
    if (ppk_py_recorder_check_open(self)) {
        Py_XDECREF(keep);
        return NULL;
    }
    int rc = ppk_recorder_set_endpoint(self->rec, id, ep);
    Py_XDECREF(keep);
    if (rc) return ppk_py_error(rc, "Recorder.set_endpoint", NULL);
    Py_RETURN_NONE;
}

static PyObject *Recorder_add_endpoint_count(RecorderObject *self, PyObject *args,
                                             PyObject *kwds) {
    static char *kwlist[] = {"endpoint", "count", NULL};
    PyObject *ep_obj, *count_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O", kwlist, &ep_obj, &count_obj))
        return NULL;
    int64_t count = 1;
    ppk_str ep;
    PyObject *keep;
    if ((count_obj && ppk_py_i64(count_obj, "count", &count)) ||
        ppk_py_str(ep_obj, "endpoint", 0, &ep, &keep))
        return NULL;
    /* Checked after the conversions: __index__ may have closed the recorder. */
    if (ppk_py_recorder_check_open(self)) {
        Py_XDECREF(keep);
        return NULL;
    }
    int rc = ppk_recorder_add_endpoint_count(self->rec, ep, count);
    Py_XDECREF(keep);
    if (rc) return ppk_py_error(rc, "Recorder.add_endpoint_count", NULL);
    Py_RETURN_NONE;
}

/* ---- Attributes -------------------------------------------------------------------- */

static PyObject *Recorder_get_sample_types(RecorderObject *self, void *closure) {
    (void)closure;
    return Py_NewRef(self->sample_types);
}

static PyObject *Recorder_get_closed(RecorderObject *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(self->rec == NULL);
}

static PyObject *Recorder_get_codec(RecorderObject *self, void *closure) {
    (void)closure;
    return PyUnicode_FromString(codec_names[self->codec]);
}

static PyGetSetDef Recorder_getset[] = {
    {"sample_types", (getter)Recorder_get_sample_types, NULL,
     "the (type, unit) pairs, in the order of a sample's values", NULL},
    {"closed", (getter)Recorder_get_closed, NULL, "True once close() has finished", NULL},
    {"codec", (getter)Recorder_get_codec, NULL, "codec of the exports", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Recorder_methods[] = {
    {"start", (PyCFunction)Recorder_start, METH_NOARGS,
     "start(): starts the background exporter (an export to the sinks every "
     "export_period_ms)."},
    {"stop", (PyCFunction)Recorder_stop, METH_NOARGS,
     "stop(): stops the background exporter; it exports the last window to the sinks. "
     "Releases the GIL."},
    {"shutdown_uploads", (PyCFunction)Recorder_shutdown_uploads, METH_NOARGS,
     "shutdown_uploads(): stops the upload sinks, all at once: each drains its queue for "
     "up to its shutdown_timeout_ms, then cancels what is left (dropped_shutdown in its "
     "stats, which stay readable until close()); later exports to them are refused and "
     "counted. Releases the GIL."},
    {"export", (PyCFunction)Recorder_export, METH_NOARGS,
     "export() -> Export: swaps the window and returns it encoded (the sinks are not "
     "called). Releases the GIL."},
    {"export_to_sinks", (PyCFunction)Recorder_export_to_sinks, METH_NOARGS,
     "export_to_sinks(): swaps the window and hands it to every sink. Releases the GIL."},
    {"stats", (PyCFunction)Recorder_stats, METH_NOARGS, "stats() -> dict of the statistics"},
    {"set_endpoint", (PyCFunction)(void (*)(void))Recorder_set_endpoint,
     METH_VARARGS | METH_KEYWORDS,
     "set_endpoint(local_root_span_id, endpoint): samples labelled with that numeric "
     "\"local root span id\" get a \"trace endpoint\" label in this window."},
    {"add_endpoint_count", (PyCFunction)(void (*)(void))Recorder_add_endpoint_count,
     METH_VARARGS | METH_KEYWORDS,
     "add_endpoint_count(endpoint, count=1): requests seen for an endpoint in this window."},
    {"add_file_sink", (PyCFunction)(void (*)(void))ppk_py_recorder_add_file_sink,
     METH_VARARGS | METH_KEYWORDS,
     "add_file_sink(dir, name='profile'): each export to the sinks becomes "
     "dir/name.PID.SEQ.pb.gz (.pb.zst, .pb)."},
    {"add_datadog_sink", (PyCFunction)(void (*)(void))ppk_py_recorder_add_datadog_sink,
     METH_VARARGS | METH_KEYWORDS,
     "add_datadog_sink(*, from_env=True, **config) -> UploadSink: uploads to a Datadog "
     "agent or the agentless intake; DD_* variables first, then the keywords."},
    {"add_pyroscope_sink", (PyCFunction)(void (*)(void))ppk_py_recorder_add_pyroscope_sink,
     METH_VARARGS | METH_KEYWORDS,
     "add_pyroscope_sink(*, from_env=True, **config) -> UploadSink: uploads to "
     "Pyroscope / Grafana; PYROSCOPE_* variables first, then the keywords."},
    {"add_otlp_sink", (PyCFunction)(void (*)(void))ppk_py_recorder_add_otlp_sink,
     METH_VARARGS | METH_KEYWORDS,
     "add_otlp_sink(*, from_env=True, **config) -> UploadSink: uploads OTLP profiles "
     "(experimental) to an OpenTelemetry collector; OTEL_* variables first, then the "
     "keywords."},
    {"seal", (PyCFunction)Recorder_seal, METH_NOARGS,
     "seal(): ends recording: from now on a flush raises ClosedError (counted in "
     "samples_dropped_closed), while export(), stats() and the sinks go on; export() then "
     "takes the last window, with every sample flushed before. Idempotent."},
    {"close", (PyCFunction)Recorder_close, METH_NOARGS,
     "close(): stops the exporter, exports the last window to the sinks, drains the "
     "uploads and frees the recorder. Idempotent. Releases the GIL while it waits."},
    {"__enter__", (PyCFunction)Recorder_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Recorder_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject ppk_py_RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pprofkit.Recorder",
    .tp_basicsize = sizeof(RecorderObject),
    .tp_dealloc = (destructor)Recorder_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Recorder(sample_types, *, period=0, period_type=None, export_period_ms=None, "
              "memory_limit=None, chunk_size=None, keep_bytes=None, max_string_len=None, "
              "max_frames=None, max_labels=None, shards=None, out_dir=None, name=None, "
              "codec='gzip', level=0, builder_keep_bytes=None, builder_max_bytes=None)\n\n"
              "A thread-safe recorder (ppk_recorder): Samples flush into its active "
              "window; export() swaps and encodes it. None keeps the library's default.",
    .tp_weaklistoffset = offsetof(RecorderObject, weakrefs),
    .tp_methods = Recorder_methods,
    .tp_getset = Recorder_getset,
    .tp_new = Recorder_new,
};

int ppk_py_recorder_ready(void) {
    return PyType_Ready(&ppk_py_RecorderType) || PyType_Ready(&ppk_py_UploadSinkType);
}
