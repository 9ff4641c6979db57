/*
 * binding.h - what the files of the pprofkit._native extension share.
 *
 * The extension is written against the public header (include/pprofkit.h) only. It has
 * three types: Recorder (a ppk_recorder), Sample (a ppk_sample builder) and UploadSink
 * (a handle on an upload sink the recorder owns), and one struct sequence, Export.
 *
 * The GIL and pprofkit's locks: no pprofkit callback ever runs Python code, so no thread
 * ever holds a pprofkit lock while it waits for the GIL. Calls that can block for long
 * (export, stop, close, stats, upload flush) release the GIL around the library call;
 * the rest (builder calls, which take a shard lock only for an in-memory insert) keep
 * it, which also serializes the calls on one builder made from several Python threads.
 */
#ifndef PPK_PY_BINDING_H
#define PPK_PY_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>

#include "pprofkit.h"

/* The most upload sinks the binding keeps track of per recorder (the library's limit on
 * sinks of any kind). */
#define PPK_PY_MAX_UPLOADS 16

typedef struct RecorderObject RecorderObject;

typedef struct UploadSinkObject {
    PyObject_HEAD
    RecorderObject *recorder; /* strong reference; the sink lives as long as it */
    ppk_sink sink;            /* a copy of the sink the recorder owns */
    const char *kind;         /* "datadog", "pyroscope" or "otlp" */
} UploadSinkObject;

struct RecorderObject {
    PyObject_HEAD
    ppk_recorder *rec;     /* NULL once closed */
    int closing;           /* close() began: every new call is refused */
    atomic_int busy;       /* calls in progress with the GIL released, and a Sampler's
                            * recording phase (sampler.c) */
    size_t n_values;       /* number of sample types */
    size_t max_string_len; /* the profile's: strings are cut there */
    size_t max_frames;     /* the profile's: deeper stacks are cut there */
    PyObject *sample_types; /* tuple of (type, unit) tuples */
    ppk_codec codec;
    int has_sinks;         /* a file or upload sink was added: close exports to them */
    ppk_sink uploads[PPK_PY_MAX_UPLOADS]; /* copies of the upload sinks added */
    size_t n_uploads;
    RecorderObject *next_live; /* every open recorder, for the fork handler */
    RecorderObject *prev_live;
    PyObject *weakrefs;
};

typedef struct SampleObject {
    PyObject_HEAD
    RecorderObject *recorder; /* strong reference */
    ppk_sample *s;            /* NULL once closed */
    int busy;                 /* record() calls in progress (GIL-protected) */
    int close_pending;        /* close() came during record(): the last one frees */
} SampleObject;

extern PyTypeObject ppk_py_RecorderType;
extern PyTypeObject ppk_py_SampleType;
extern PyTypeObject ppk_py_UploadSinkType;
extern PyTypeObject ppk_py_SamplerType;
extern PyTypeObject *ppk_py_ExportType;

/* module.c: errors. Sets the Python exception that matches a ppk code (`what` names the
 * call, `detail` may add a message such as the sink's err text) and returns NULL. */
PyObject *ppk_py_error(int code, const char *what, const char *detail);

/* module.c: conversions. A str (UTF-8, surrogates encoded with surrogatepass so that the
 * library repairs them, counted) or a bytes-like bytes object (passed as is) to a
 * ppk_str that stays valid while *keep is alive; *keep receives a new reference or NULL.
 * None is refused unless allow_none (then the empty string). Returns 0 or -1 (error
 * set). */
int ppk_py_str(PyObject *o, const char *what, int allow_none, ppk_str *out, PyObject **keep);
/* An int (anything with __index__, so bool too, not float) to int64; OverflowError or
 * TypeError otherwise. */
int ppk_py_i64(PyObject *o, const char *what, int64_t *out);
/* A non-negative int to uint64 / size_t. */
int ppk_py_u64(PyObject *o, const char *what, uint64_t *out);
int ppk_py_size(PyObject *o, const char *what, size_t *out);

/* module.c: statistics as dicts. */
PyObject *ppk_py_recorder_stats(const ppk_recorder_stats *st);
PyObject *ppk_py_profile_stats(const ppk_profile_stats *st);
PyObject *ppk_py_upload_stats(const ppk_upload_stats *st);

/* Runs `stmt` with the GIL released, counted in r->busy so that Recorder.close() waits
 * for it (recorder.c). */
#define PPK_PY_NOGIL(r, stmt)                                                              \
    do {                                                                                   \
        atomic_fetch_add(&(r)->busy, 1);                                                   \
        PyThreadState *ts_ = PyEval_SaveThread();                                          \
        stmt;                                                                              \
        PyEval_RestoreThread(ts_);                                                         \
        atomic_fetch_sub(&(r)->busy, 1);                                                   \
    } while (0)

/* module.c: pthread_create with every signal blocked in the new thread but a fault's,
 * as the library's own threads: a signal sent to the process goes to one of the
 * program's threads. */
int ppk_py_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);

/* sigterm.c: while armed for recorder r (a strong reference kept), SIGTERM exports r's
 * last window before it kills the process. Arming: 1, or 0 when SIGTERM's disposition
 * is not the default, another recorder is armed, the pid is 1, or what it needs cannot
 * be made. sinks: r has a new sink. closing: the stop of r's profiler begins (it
 * exports the last window itself; a SIGTERM from then on waits for it); disarm: r's
 * close has exported it, r is not freed yet; kills the process if a SIGTERM came
 * meanwhile, else restores the default disposition if the handler is still this one,
 * and returns the reference to r for the caller to release once done with r (NULL if
 * r was not armed). closing and disarm do nothing for another recorder than the armed
 * one and may release the GIL. All with the GIL. */
int ppk_py_sigterm_arm(RecorderObject *r);
void ppk_py_sigterm_sinks(RecorderObject *r);
void ppk_py_sigterm_closing(RecorderObject *r);
PyObject *ppk_py_sigterm_disarm(RecorderObject *r);
void ppk_py_sigterm_after_fork_child(void);

/* recorder.c */
/* What close() does before it frees the recorder, without the GIL: stops its exporter
 * (which exports the last window), exports what that left, drains the uploads. */
void ppk_py_last_window(ppk_recorder *rec, int has_sinks, const ppk_sink *uploads,
                        size_t n_uploads);
/* 0 if the recorder is open (not closed, not closing); ClosedError and -1 otherwise. */
int ppk_py_recorder_check_open(RecorderObject *r);
void ppk_py_after_fork_child(void);
int ppk_py_recorder_ready(void);

/* sinks.c: the Recorder's sink methods. */
PyObject *ppk_py_recorder_add_file_sink(RecorderObject *self, PyObject *args,
                                        PyObject *kwds);
PyObject *ppk_py_recorder_add_datadog_sink(RecorderObject *self, PyObject *args,
                                           PyObject *kwds);
PyObject *ppk_py_recorder_add_pyroscope_sink(RecorderObject *self, PyObject *args,
                                             PyObject *kwds);
PyObject *ppk_py_recorder_add_otlp_sink(RecorderObject *self, PyObject *args, PyObject *kwds);

/* sample.c */
int ppk_py_sample_ready(void);

/* sampler.c */
int ppk_py_sampler_ready(void);
/* Before fork() (with the GIL): waits until the main thread does not hand the GIL over
 * inside a pending call, and keeps it from doing so until the fork is done. */
void ppk_py_samplers_before_fork(void);
void ppk_py_samplers_after_fork_parent(void);
/* In a forked child: every started sampler forgets its thread (Sampler._after_fork_child
 * starts it again). */
void ppk_py_samplers_after_fork_child(void);
/* Stops every started sampler (at exit, before finalization). */
void ppk_py_samplers_stop_all(void);
/* A thread of the package's own that no pass samples (0: none): the one that waits, in
 * a child forked by a thread other than the main one, for that thread's end
 * (profiler.py). */
void ppk_py_hide_thread(unsigned long ident);

/* internals.c: makes the main thread run its pending calls at its next bytecode
 * boundary if it holds the GIL (3.11, 3.12; nothing on 3.13, which does it itself). */
void ppk_py_wake_main(PyInterpreterState *interp, const PyThreadState *main_ts);
/* internals.c: how many times the GIL of interp changed holders so far (CPython counts
 * a take by a thread other than the last holder); with or without the GIL. */
unsigned long ppk_py_gil_takes(PyInterpreterState *interp);
/* internals.c: the thread state that took the GIL last (it may hold it still, or take
 * it back without CPython counting a change; only to be compared), and whether the GIL
 * is held; with or without the GIL. */
const PyThreadState *ppk_py_gil_last_holder(PyInterpreterState *interp, int *locked);
/* internals.c: whether thread state t belongs to its thread yet (a new thread's state is
 * in the interpreter's list before the thread runs; until then its thread_id and
 * native_thread_id are 0 or, on 3.11, those of the thread that starts it); with the
 * GIL. */
int ppk_py_tstate_bound(const PyThreadState *t);
/* internals.c: asks for the lines of thread state t that a pass reads (its links, its
 * frame, its ids, whether it is bound) without reading them: t may be gone. */
void ppk_py_tstate_prefetch(const PyThreadState *t);
/* internals.c: makes ts, a thread state that another thread made (PyThreadState_New)
 * and that the calling thread holds the GIL with, this thread's own for the GIL-state
 * API, as PyThreadState_New does for the thread that calls it: PyGILState_Check() then
 * holds in this thread (the debug allocators, `python -X dev`, check it at every
 * allocation and abort without), and a PyGILState_Ensure() there (a finalizer of an
 * extension's object that the thread releases) finds the GIL held instead of making
 * another thread state and waiting for the GIL forever. Its gilstate_counter is 1 (a
 * new thread state's), so a PyGILState_Release there does not delete it. */
void ppk_py_note_thread_state(PyThreadState *ts);
/* internals.c: before another thread deletes ts (the thread that noted it has ended):
 * on 3.12 and later, PyThreadState_Delete clears the GIL-state thread state of the
 * thread that calls it when ts was noted as some thread's, whichever: the deleting
 * thread's own would be forgotten (PyGILState_Check() false there from then on, the
 * debug allocators aborting, a PyGILState_Ensure() there waiting forever for the GIL it
 * holds). This marks ts as no thread's. */
void ppk_py_unnote_thread_state(PyThreadState *ts);
/* Whether dict d's keys table holds exact str keys only (internals.c). */
int ppk_py_dict_str_keys(PyObject *d);
/* internals.c: queues fn to run, with the GIL, in whichever thread of interp next
 * reaches a bytecode boundary (the holder, when one runs Python code): 0, or -1 when
 * the queue is full or the version has no such queue (3.11). */
int ppk_py_holder_call(PyInterpreterState *interp, int (*fn)(void *));
#define PPK_PY_HOLDER_CALLS (PY_VERSION_HEX >= 0x030C0000)
#if !PPK_PY_HOLDER_CALLS
/* internals.c (3.11): asks the thread that holds the GIL of interp to let it go at its
 * next bytecode boundary, with or without the GIL. */
void ppk_py_ask_drop(PyInterpreterState *interp);
#endif
/* internals.c: around a call that checks for signals (CPython 3.12 and 3.13's
 * _asyncio.Task.get_name, the first time): ppk_py_checks_begin puts off a collection
 * scheduled for this thread, which the check would run there and then; -1 when a
 * signal is pending that this thread would handle (Python code): no such call then.
 * ppk_py_checks_end(its result) schedules the collection again. */
int ppk_py_checks_begin(void);
void ppk_py_checks_end(int state);
/* internals.c: a walk through thread t's frames, innermost first, with the GIL held
 * (valid while it is). */
typedef struct ppk_py_walk {
    const void *f; /* the next frame, NULL at the end */
} ppk_py_walk;
void ppk_py_walk_begin(ppk_py_walk *w, PyThreadState *t);
/* A frame: its code (borrowed) and instruction offset in bytes (as PyFrame_GetLasti),
 * and whether it is complete whatever the offset (a generator's frame). Any other frame
 * is complete if its offset is past its code's prologue (ppk_py_frame_traceable): one
 * that is not (a function still in its prologue) is left out, as PyFrame_GetBack does. */
typedef struct ppk_py_frame_ref {
    PyCodeObject *code;
    int lasti;
    int complete;
} ppk_py_frame_ref;
/* internals.c: whether instruction offset lasti of code is past its prologue. */
int ppk_py_frame_traceable(PyCodeObject *code, int lasti);
/* The walk's next frames (but C-stack entry frames), up to max of them, into refs: how
 * many (0 at the end). */
size_t ppk_py_walk_read(ppk_py_walk *w, ppk_py_frame_ref *refs, size_t max);
/* Counts the walk's remaining frames (but C-stack entry frames), reading only their
 * links, and ends it: the frames of a stack past those a sample keeps. Every one is
 * complete (only a thread's innermost frame can be in its prologue). */
size_t ppk_py_walk_count(ppk_py_walk *w);
/* The number of frames a walk of thread t gives (ppk_py_walk_begin), from CPython's own
 * count, without a walk; -1 where it has none (3.11). */
long ppk_py_frame_count(PyThreadState *t);
/* Reads the next frames of n walks at once, up to `depth` of each: walk i's into
 * refs[i * depth ...], how many into counts[i]. Faster than one walk after the other
 * when their frames are not in the caches. */
void ppk_py_walk_ahead(ppk_py_walk *ws, size_t n, ppk_py_frame_ref *refs, size_t depth,
                       size_t *counts);
/* The frame of generator or coroutine `gen` (an exact PyGen, PyCoro or PyAsyncGen),
 * read from the object as ppk_py_walk_read reads a thread's (no frame object made): 1,
 * or 0 when it has finished (its gi_frame / cr_frame / ag_frame is None). */
int ppk_py_gen_frame(PyObject *gen, ppk_py_frame_ref *ref);
/* internals.c: the async generator (borrowed) that o steps, when o is one's asend()
 * awaitable (its __anext__, what `async for` awaits), else NULL. */
PyObject *ppk_py_asend_gen(PyObject *o);

#endif
