/*
 * sinks.c - the sinks a Recorder hands its exports to, from Python: files
 * (Recorder.add_file_sink), Datadog, Pyroscope and OTLP uploads (add_datadog_sink,
 * add_pyroscope_sink, add_otlp_sink: keyword arguments set the fields of the library's
 * configs, after the DD_* / PYROSCOPE_* / OTEL_* variables unless from_env=False; the
 * OTLP resource's fields are keywords of their own: service_name, ..., and
 * resource_attributes), and pprofkit.UploadSink, the
 * handle on an upload sink the recorder owns (its statistics, its flush). The recorder
 * owns every sink: close() drains the uploads, then frees them with it; a handle
 * refuses its calls once its recorder is closed.
 */
#include "binding.h"

#include <stddef.h>
#include <string.h>

/* ---- UploadSink handles ------------------------------------------------------------ */

static PyObject *upload_handle(RecorderObject *self, const ppk_sink *sink, const char *kind) {
    self->uploads[self->n_uploads++] = *sink;
    ppk_py_sigterm_sinks(self);
    UploadSinkObject *u = PyObject_New(UploadSinkObject, &ppk_py_UploadSinkType);
    if (!u) return NULL; /* the recorder still owns and drains the sink */
    u->recorder = (RecorderObject *)Py_NewRef(self);
    u->sink = *sink;
    u->kind = kind;
    return (PyObject *)u;
}

/* ---- Adding sinks ------------------------------------------------------------------ */

static int add_sink(RecorderObject *self, const ppk_sink *sink, const char *what) {
    int rc = ppk_recorder_add_sink(self->rec, sink);
    if (rc) {
        if (sink->destroy) sink->destroy(sink->opaque);
        ppk_py_error(rc, what, rc == PPK_EFULL ? "at most 16 sinks per recorder" : NULL);
        return -1;
    }
    self->has_sinks = 1;
    ppk_py_sigterm_sinks(self);
    return 0;
}

PyObject *ppk_py_recorder_add_file_sink(RecorderObject *self, PyObject *args,
                                        PyObject *kwds) {
    static char *kwlist[] = {"dir", "name", NULL};
    PyObject *dir_obj, *name_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O", kwlist, &dir_obj, &name_obj))
        return NULL;
    if (ppk_py_recorder_check_open(self)) return NULL;
    ppk_str dir, name;
    PyObject *kd, *kn;
    if (ppk_py_str(dir_obj, "dir", 0, &dir, &kd)) return NULL;
    if (ppk_py_str(name_obj ? name_obj : Py_None, "name", 1, &name, &kn)) {
        Py_XDECREF(kd);
        return NULL;
    }
    if (!name.len) name = PPK_STR("profile");
    ppk_sink sink;
    int rc = ppk_sink_file(dir, name, &sink);
    Py_XDECREF(kd);
    Py_XDECREF(kn);
    if (rc) return ppk_py_error(rc, "Recorder.add_file_sink", NULL);
    if (add_sink(self, &sink, "Recorder.add_file_sink")) return NULL;
    Py_RETURN_NONE;
}

/* A field of an upload sink's config, set from a keyword argument. */
typedef struct cfg_field {
    const char *name;
    size_t off;
    char type; /* 's' ppk_str, 'b' int flag, 'i' int, 'l' int64_t, 'z' size_t */
} cfg_field;

#define UPLOAD_FIELDS(T)                                                                   \
    {"queue_len", offsetof(T, upload.queue_len), 'z'},                                     \
        {"connect_timeout_ms", offsetof(T, upload.connect_timeout_ms), 'l'},               \
        {"timeout_ms", offsetof(T, upload.timeout_ms), 'l'},                               \
        {"retry_backoff_ms", offsetof(T, upload.retry_backoff_ms), 'l'},                   \
        {"shutdown_timeout_ms", offsetof(T, upload.shutdown_timeout_ms), 'l'},             \
        {"fork_timeout_ms", offsetof(T, upload.fork_timeout_ms), 'l'}, {NULL, 0, 0}

#define DD(f, t) {#f, offsetof(ppk_datadog_config, f), t}
static const cfg_field datadog_fields[] = {
    DD(agent_url, 's'), DD(agent_host, 's'),  DD(agent_port, 'i'),       DD(agentless, 'b'),
    DD(api_key, 's'),   DD(site, 's'),        DD(intake_url, 's'),       DD(service, 's'),
    DD(env, 's'),       DD(version, 's'),     DD(host, 's'),             DD(runtime_id, 's'),
    DD(tags, 's'),      DD(family, 's'),      DD(language, 's'),         DD(profiler_name, 's'),
    DD(profiler_version, 's'), UPLOAD_FIELDS(ppk_datadog_config)};

#define PY(f, t) {#f, offsetof(ppk_pyroscope_config, f), t}
static const cfg_field pyroscope_fields[] = {
    PY(server_address, 's'), PY(application_name, 's'), PY(tags, 's'),
    PY(spy_name, 's'),       PY(sample_rate, 'l'),      PY(basic_auth_user, 's'),
    PY(basic_auth_password, 's'), PY(auth_token, 's'),  PY(tenant_id, 's'),
    UPLOAD_FIELDS(ppk_pyroscope_config)};

#define OT(f, t) {#f, offsetof(ppk_otlp_config, f), t}
#define OTR(f, t) {#f, offsetof(ppk_otlp_config, resource.f), t}
static const cfg_field otlp_fields[] = {
    OT(endpoint, 's'),       OT(profiles_endpoint, 's'), OT(headers, 's'),
    OT(gzip, 'b'),           OTR(service_name, 's'),     OTR(service_version, 's'),
    OTR(environment, 's'),   OTR(host_name, 's'),        OTR(sdk_language, 's'),
    {"resource_attributes", offsetof(ppk_otlp_config, resource.attributes), 's'},
    UPLOAD_FIELDS(ppk_otlp_config)};

/* Sets the config fields named by the keyword arguments (None leaves a field alone);
 * strings stay valid while `kwds` and `keeps` live. */
static int apply_fields(void *cfg, const cfg_field *fields, PyObject *kwds, PyObject *keeps,
                        const char *what) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (kwds && PyDict_Next(kwds, &pos, &key, &value)) {
        const cfg_field *f = fields;
        while (f->name && PyUnicode_CompareWithASCIIString(key, f->name) != 0) f++;
        if (!f->name) {
            if (PyUnicode_CompareWithASCIIString(key, "from_env") == 0) continue;
            PyErr_Format(PyExc_TypeError, "%s got an unexpected keyword argument %R", what,
                         key);
            return -1;
        }
        if (value == Py_None) continue;
        char *p = (char *)cfg + f->off;
        int64_t v = 0;
        size_t z = 0;
        PyObject *keep = NULL;
        switch (f->type) {
        case 's':
            if (ppk_py_str(value, f->name, 0, (ppk_str *)p, &keep)) return -1;
            if (keep) {
                int rc = PyList_Append(keeps, keep);
                Py_DECREF(keep);
                if (rc) return -1;
            }
            break;
        case 'b': {
            int t = PyObject_IsTrue(value);
            if (t < 0) return -1;
            *(int *)p = t;
            break;
        }
        case 'i':
            if (ppk_py_i64(value, f->name, &v)) return -1;
            if (v < INT32_MIN || v > INT32_MAX) {
                PyErr_Format(PyExc_OverflowError, "%s is out of range", f->name);
                return -1;
            }
            *(int *)p = (int)v;
            break;
        case 'l':
            if (ppk_py_i64(value, f->name, (int64_t *)p)) return -1;
            break;
        case 'z':
            if (ppk_py_size(value, f->name, &z)) return -1;
            *(size_t *)p = z;
            break;
        }
    }
    return 0;
}

/* from_env: a keyword argument, true unless given and false. */
static int want_env(PyObject *kwds) {
    PyObject *v = kwds ? PyDict_GetItemString(kwds, "from_env") : NULL;
    return v ? PyObject_IsTrue(v) : 1;
}

/* A kind of upload sink: its configuration's keywords, defaults (with the Python
 * profiler's family or spy name), environment and constructor. */
typedef union upload_config {
    ppk_datadog_config datadog;
    ppk_pyroscope_config pyroscope;
    ppk_otlp_config otlp;
} upload_config;

typedef struct upload_kind {
    const char *name;   /* "datadog", "pyroscope", "otlp" */
    const char *method; /* "add_datadog_sink", ... */
    const cfg_field *fields;
    void (*init)(upload_config *cfg);
    int (*from_env)(upload_config *cfg, char *err, size_t err_len);
    int (*make)(const upload_config *cfg, ppk_sink *out, char *err, size_t err_len);
} upload_kind;

static void datadog_init(upload_config *cfg) {
    ppk_datadog_config_init(&cfg->datadog);
    cfg->datadog.family = PPK_STR("python");
}
static int datadog_env(upload_config *cfg, char *err, size_t n) {
    return ppk_datadog_config_from_env(&cfg->datadog, err, n);
}
static int datadog_make(const upload_config *cfg, ppk_sink *out, char *err, size_t n) {
    return ppk_sink_datadog(&cfg->datadog, out, err, n);
}
static void pyroscope_init(upload_config *cfg) {
    ppk_pyroscope_config_init(&cfg->pyroscope);
    cfg->pyroscope.spy_name = PPK_STR("pprofkit-python");
}
static int pyroscope_env(upload_config *cfg, char *err, size_t n) {
    return ppk_pyroscope_config_from_env(&cfg->pyroscope, err, n);
}
static int pyroscope_make(const upload_config *cfg, ppk_sink *out, char *err, size_t n) {
    return ppk_sink_pyroscope(&cfg->pyroscope, out, err, n);
}

static void otlp_init(upload_config *cfg) {
    ppk_otlp_config_init(&cfg->otlp);
    cfg->otlp.resource.sdk_language = PPK_STR("python");
}
static int otlp_env(upload_config *cfg, char *err, size_t n) {
    return ppk_otlp_config_from_env(&cfg->otlp, err, n);
}
static int otlp_make(const upload_config *cfg, ppk_sink *out, char *err, size_t n) {
    return ppk_sink_otlp(&cfg->otlp, out, err, n);
}

static const upload_kind datadog_kind = {"datadog", "add_datadog_sink", datadog_fields,
                                         datadog_init, datadog_env, datadog_make};
static const upload_kind pyroscope_kind = {"pyroscope", "add_pyroscope_sink",
                                           pyroscope_fields, pyroscope_init, pyroscope_env,
                                           pyroscope_make};

static const upload_kind otlp_kind = {"otlp", "add_otlp_sink", otlp_fields, otlp_init,
                                      otlp_env, otlp_make};

/* The room for one more upload sink; ClosedError or InvalidArgumentError otherwise. */
static int upload_room(RecorderObject *self, const char *what) {
    if (ppk_py_recorder_check_open(self)) return -1;
    if (self->n_uploads < PPK_PY_MAX_UPLOADS) return 0;
    ppk_py_error(PPK_EINVAL, what, "too many upload sinks");
    return -1;
}

static PyObject *add_upload(RecorderObject *self, PyObject *args, PyObject *kwds,
                            const upload_kind *k) {
    char what[64];
    PyOS_snprintf(what, sizeof what, "Recorder.%s", k->method);
    if (PyTuple_GET_SIZE(args)) {
        PyErr_Format(PyExc_TypeError, "%s takes keyword arguments only", k->method);
        return NULL;
    }
    if (upload_room(self, what)) return NULL;
    upload_config cfg;
    k->init(&cfg);
    char err[256] = "";
    int env = want_env(kwds);
    if (env < 0) return NULL;
    int rc = env ? k->from_env(&cfg, err, sizeof err) : 0;
    if (rc) return ppk_py_error(rc, what, err);
    PyObject *keeps = PyList_New(0);
    if (!keeps) return NULL;
    /* Checked again after the conversions: __index__ or __bool__ may have closed the
     * recorder or added sinks meanwhile. */
    if (apply_fields(&cfg, k->fields, kwds, keeps, k->method) || upload_room(self, what)) {
        Py_DECREF(keeps);
        return NULL;
    }
    ppk_sink sink;
    rc = k->make(&cfg, &sink, err, sizeof err);
    Py_DECREF(keeps);
    if (rc) return ppk_py_error(rc, what, err);
    if (add_sink(self, &sink, what)) return NULL;
    return upload_handle(self, &sink, k->name);
}

PyObject *ppk_py_recorder_add_datadog_sink(RecorderObject *self, PyObject *args,
                                           PyObject *kwds) {
    return add_upload(self, args, kwds, &datadog_kind);
}

PyObject *ppk_py_recorder_add_pyroscope_sink(RecorderObject *self, PyObject *args,
                                             PyObject *kwds) {
    return add_upload(self, args, kwds, &pyroscope_kind);
}

PyObject *ppk_py_recorder_add_otlp_sink(RecorderObject *self, PyObject *args,
                                        PyObject *kwds) {
    return add_upload(self, args, kwds, &otlp_kind);
}

/* ---- UploadSink -------------------------------------------------------------------- */

static void UploadSink_dealloc(UploadSinkObject *self) {
    Py_XDECREF(self->recorder);
    PyObject_Free(self);
}

static PyObject *UploadSink_stats(UploadSinkObject *self, PyObject *unused) {
    (void)unused;
    RecorderObject *r = self->recorder;
    if (!r->rec) return ppk_py_error(PPK_ECLOSED, "UploadSink.stats", NULL);
    ppk_upload_stats st;
    int rc = ppk_sink_upload_stats(&self->sink, &st);
    if (rc) return ppk_py_error(rc, "UploadSink.stats", NULL);
    return ppk_py_upload_stats(&st);
}

static PyObject *UploadSink_flush(UploadSinkObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"timeout_ms", NULL};
    PyObject *t_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O", kwlist, &t_obj)) return NULL;
    int64_t timeout_ms = 10000;
    if (t_obj && ppk_py_i64(t_obj, "timeout_ms", &timeout_ms)) return NULL;
    RecorderObject *r = self->recorder;
    if (ppk_py_recorder_check_open(r)) return NULL;
    int rc;
    PPK_PY_NOGIL(r, rc = ppk_sink_upload_flush(&self->sink, timeout_ms));
    if (rc == PPK_ETIMEDOUT) Py_RETURN_FALSE;
    if (rc) return ppk_py_error(rc, "UploadSink.flush", NULL);
    Py_RETURN_TRUE;
}

static PyObject *UploadSink_get_kind(UploadSinkObject *self, void *closure) {
    (void)closure;
    return PyUnicode_FromString(self->kind);
}

static PyMethodDef UploadSink_methods[] = {
    {"stats", (PyCFunction)UploadSink_stats, METH_NOARGS,
     "stats() -> dict of the sink's upload statistics (until its recorder is closed)"},
    {"flush", (PyCFunction)(void (*)(void))UploadSink_flush, METH_VARARGS | METH_KEYWORDS,
     "flush(timeout_ms=10000) -> bool: waits until nothing is queued or in flight; False "
     "on timeout; SystemCallError if exports are queued and the uploader thread cannot be "
     "started. Releases the GIL."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef UploadSink_getset[] = {
    {"kind", (getter)UploadSink_get_kind, NULL, "\"datadog\", \"pyroscope\" or \"otlp\"", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ppk_py_UploadSinkType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "pprofkit.UploadSink",
    .tp_basicsize = sizeof(UploadSinkObject),
    .tp_dealloc = (destructor)UploadSink_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An upload sink owned by a Recorder (from add_datadog_sink or "
              "add_pyroscope_sink): its statistics and flush.",
    .tp_methods = UploadSink_methods,
    .tp_getset = UploadSink_getset,
};
