"""The sampling profiler: pprofkit.start() / stop(), `with pprofkit.profile()`, tag().

A Profiler is a Recorder (sample types wall time, CPU time and a count), a Sampler (the
native thread of the extension that samples every Python thread `rate` times a second)
and sinks: .pb.gz files in a directory, Datadog, Pyroscope. Its background exporter
writes a profile every `export_period` seconds; stop() writes the last one.

One profiler runs per process (start() while one runs is an error). It stops at
interpreter exit (atexit), and before os._exit (which it wraps while it runs), so that
a process leaving through os._exit, as multiprocessing's children do, still writes its
last window; SIGTERM, unless the program handles it, writes it too before the process
dies of it. In a child made by os.fork() it goes on by itself: its sampling thread is
started again, its files carry the child's pid, its Datadog runtime-id is new.
"""

import _thread
import atexit
import contextlib
import os
import re
import sys
import threading
import time
import urllib.parse
import weakref

from . import _native

WALL_TIME = ("wall-time", "nanoseconds")
CPU_TIME = ("cpu-time", "nanoseconds")
SAMPLES = ("samples", "count")

# Labels of pprofkit.tag(), read by the sampler without running Python code: thread
# ident -> ((key, value), ...) and id(task) -> ((key, value), ...), the merged labels of
# the blocks running for it, which _tag_blocks keeps: (table, ident or id) -> [their
# labels (a dict each), outermost first]. Entries live while a block runs.
_tags_thread = {}
_tags_task = {}
_tag_blocks = {}


class _ThreadTags:
    """Kept by a thread (_thread_tags) from its first tag() block: when the thread ends,
    its labels go with it. A block that a suspended generator holds open would otherwise
    label the next thread of the same ident (idents are reused as soon as a thread
    ends); a thread's locals are dropped before it ends, so before its ident can be."""

    __slots__ = ("ident",)

    def __init__(self, ident):
        self.ident = ident

    def __del__(self, tags=_tags_thread, blocks=_tag_blocks):
        # (The dicts bound here: at the interpreter's end the module's globals may be
        # gone when a thread's locals are.)
        tags.pop(self.ident, None)
        blocks.pop((False, self.ident), None)


_thread_tags = threading.local()
# The sampler's own labels and the library's reserved key (a tag() cannot set them), and
# the most labels tag() blocks may give one sample: the library's default max_labels
# (32) less the sampler's own.
_SAMPLER_LABELS = ("thread id", "thread native id", "thread name", "task name", "task id",
                   "task state", "parent task", "parent task id")
_RESERVED_LABELS = frozenset(_SAMPLER_LABELS + ("end_timestamp_ns",))
_SPAN_KEY = "local root span id"  # the library takes only a non-zero int
_MAX_TAGS = 32 - len(_SAMPLER_LABELS)

# start() and stop()'s lock. Re-entered only by a signal handler (or a fork from one)
# of the thread that holds it: a handler's start() then raises and its stop() returns
# None while _busy says that start() is half done (waiting for the lock would never
# end).
_lock = threading.RLock()
_busy = False
_current = None  # the running Profiler (start() / stop())
# The Profiler `python -m pprofkit run` (or --subprocesses) started for the program:
# the program's own start() and stop() leave it running, with the command line's
# options, to the program's end.
_environment = None
_started = weakref.WeakSet()  # every Profiler started and not stopped, for exit
_real_os_exit = os._exit
_real_execv, _real_execve = os.execv, os.execve


def _coalesce_ticks(rate, export_period):
    """Ticks of a waiting task that has not moved recorded as one sample: one second's,
    or a tenth of the export period if shorter (what an export holds lags by that)."""
    return max(1, int(round(rate * min(1.0, export_period / 10))))


class Profiler:
    """A sampling profiler. Most programs use start()/stop() or profile() instead.

    rate: samples per second per thread (Hz). export_period: seconds between exports.
    out_dir: directory of the .pb.gz files (created; relative to the working directory
    at start; None: no files). codec: "gzip", "zstd" or "none". memory_limit: bytes per
    window, at least 1 MiB (None: the library's 64 MiB). max_frames: deepest stack kept,
    at least 2 (None: 512).
    wall, cpu: record wall / CPU time. service, env, version, tags: for uploads (tags:
    "k:v,k:v" or a dict). datadog: True (agent from the DD_* environment), or an agent
    URL. pyroscope: the server URL. otlp: True (collector from the OTEL_* environment),
    or the collector's base URL (OTLP profiles over HTTP, experimental; service, env,
    version and tags become the resource's service.name, deployment.environment.name,
    service.version and attributes). name: the file name prefix (default "python";
    lone surrogates are repaired, U+FFFD for each byte).
    function_ids: push frames by function id (the recorder's function dictionary; False
    pushes their strings, for comparison). asyncio_tasks: also sample every asyncio task
    that waits, one sample per task per tick (its await chain, "task name", "parent
    task"; wall time), at most max_tasks_per_tick tasks a tick (more are visited in
    turn, their wall time covering the ticks between, but for a task's time before its
    first sample and after its last, up to the ticks of one turn each); a task that has
    not moved for a while is recorded as one sample a second (a tenth of export_period
    if shorter). asyncio_task_hook: while tasks are sampled, BaseEventLoop.call_soon
    is a wrapper that notes the tasks whose steps a loop schedules (and on 3.12+
    create_task one that notes the task it made: an eager task's first step is not
    scheduled), so that a tick reads those and not every task (restored at stop;
    False: every tick visits the tasks, up to max_tasks_per_tick).
    cpu_budget: the percentage of one core that sampling may take (the sampler's thread
    and the passes other threads run for it); when a tick costs more than that at the
    rate, ticks come later (fewer samples, each weighing the time it covers). 0: no
    limit.
    """

    def __init__(self, *, rate=100.0, export_period=60.0, out_dir="pprofkit-out",
                 codec="gzip", memory_limit=None, max_frames=None, wall=True, cpu=True,
                 service=None, env=None, version=None, tags=None, datadog=None,
                 pyroscope=None, otlp=None, name="python", function_ids=True,
                 asyncio_tasks=True, max_tasks_per_tick=1000, cpu_budget=1.0,
                 asyncio_task_hook=True):
        _refuse_after_exit()
        if not wall and not cpu:
            raise ValueError("at least one of wall and cpu time must be recorded")
        if isinstance(rate, bool) or isinstance(cpu_budget, bool):
            raise TypeError("rate and cpu_budget are numbers, not bools")
        if tags is not None and not isinstance(tags, (str, dict)):
            raise TypeError("tags must be a str ('k:v,k:v') or a dict")
        rate = float(rate)
        if not 0.1 <= rate <= 10000:
            raise ValueError("rate must be between 0.1 and 10000 Hz")
        cpu_budget = float(cpu_budget)
        if not 0 <= cpu_budget <= 100:
            raise ValueError("cpu_budget must be between 0 (no limit) and 100 (percent)")
        if not 0 < export_period < float("inf"):
            raise ValueError("export_period must be positive and finite")
        if max_frames is not None and max_frames < 2:
            raise ValueError("max_frames must be at least 2 (the leaf and the root that "
                             "counts the frames left out)")
        if memory_limit is not None and memory_limit < 1 << 20:
            # The window's memory comes in chunks of 256 KiB (the library's default),
            # and a window needs room for four.
            raise ValueError("memory_limit must be at least 1 MiB (1048576 bytes)")
        if name is None:
            name = "python"
        if not isinstance(name, str) or not name:
            raise ValueError("name must be a non-empty str")
        name = _utf8_safe(name)  # the file names as the summary lists them
        types = ([WALL_TIME] if wall else []) + ([CPU_TIME] if cpu else []) + [SAMPLES]
        period_ns = int(round(1e9 / rate))
        if out_dir:
            out_dir = os.fsdecode(out_dir)  # a bytes or path-like directory too
            # Absolute: a program that changes directory keeps writing (and finding)
            # its files there.
            out_dir = os.path.abspath(out_dir)
            os.makedirs(out_dir, exist_ok=True)
        self.out_dir = out_dir
        self.name = name
        self.rate = rate
        self.recorder = _native.Recorder(
            types, period=period_ns, period_type=types[0],
            export_period_ms=max(1, int(export_period * 1000)), memory_limit=memory_limit,
            max_frames=max_frames, codec=codec,
            # As the file system has it: a name that is not UTF-8 stays that name.
            out_dir=os.fsencode(out_dir) if out_dir else None, name=name)
        self.uploads = []
        try:
            tag_text = _tags_text(tags)
            if datadog:
                kw = {"service": service, "env": env, "version": version, "tags": tag_text}
                if isinstance(datadog, str):
                    kw["agent_url"] = datadog
                self.uploads.append(self.recorder.add_datadog_sink(
                    **{k: v for k, v in kw.items() if v}))
            if pyroscope:
                app = (_pyroscope_app(service) if service else
                       os.environ.get("PYROSCOPE_APPLICATION_NAME") or _pyroscope_app(_program()))
                kw = {"application_name": app, "sample_rate": int(rate),
                      "tags": _tags_text(tags, sep="=")}
                if isinstance(pyroscope, str):
                    kw["server_address"] = pyroscope
                self.uploads.append(self.recorder.add_pyroscope_sink(
                    **{k: v for k, v in kw.items() if v}))
            if otlp:
                attributes = _otlp_attributes(tags)
                kw = {"service_name": service or os.environ.get("OTEL_SERVICE_NAME"),
                      "service_version": version, "environment": env,
                      "resource_attributes": attributes}
                if not kw["service_name"] and not any(
                        a.strip().startswith("service.name=")
                        for a in (attributes or "").split(",")):
                    kw["service_name"] = _program()  # OTel: the attribute, else a default
                if isinstance(otlp, str):
                    kw["endpoint"] = otlp
                self.uploads.append(self.recorder.add_otlp_sink(
                    **{k: v for k, v in kw.items() if v}))
            index = {t: i for i, t in enumerate(types)}
            self.sampler = _native.Sampler(
                self.recorder, rate_hz=rate, wall_index=index.get(WALL_TIME),
                cpu_index=index.get(CPU_TIME), count_index=index[SAMPLES],
                tags_thread=_tags_thread, tags_task=_tags_task, function_ids=function_ids,
                asyncio_tasks=bool(asyncio_tasks), max_tasks_per_tick=int(max_tasks_per_tick),
                coalesce_ticks=_coalesce_ticks(rate, export_period), cpu_budget=cpu_budget,
                task_hook=bool(asyncio_task_hook))
        except BaseException:
            self.recorder.close()
            raise
        self.summary = None
        self._stop_lock = threading.RLock()  # re-entered only by a signal handler
        self._stopping = False
        # Called with the summary when stop() has written the last window (the CLI
        # prints it; stop() also runs at exit and before os._exit).
        self.on_stop = None

    def start(self):
        _refuse_after_exit()
        self._start_ns = time.time_ns()
        # The files already there are not this profiler's (another one's of this
        # process, with the same names but for a suffix, stopped before).
        self._files_before = set()
        if self.out_dir:
            with contextlib.suppress(OSError):
                self._files_before = set(os.listdir(self.out_dir))
        try:
            self.recorder.start()
            self.sampler.start()
        except BaseException:
            self.sampler.stop()
            self.recorder.close()
            raise
        _started.add(self)

    def stop(self):
        """Stops sampling, writes the last window, closes the recorder; returns (and
        keeps as .summary) a dict of what was recorded. Idempotent: a call while
        another thread's stop() runs waits for it and returns the same summary; a call
        from a signal handler while this thread's stop() runs returns None. A call from
        a finalizer that the sampler itself runs (it drops the last reference to an
        object, say a code object with a weakref callback) raises RuntimeError and
        changes nothing: the sampler cannot wait for its own end there. The profiler
        `python -m pprofkit run` started for the program is not stopped (None): it
        runs to the program's end. A Ctrl-C during the stop is raised once it is done."""
        if self is _environment and not self.sampler._in_own_pass():
            return None
        return self._stop_now()

    def _stop_now(self):
        if self.sampler._in_own_pass():
            raise RuntimeError("Profiler.stop() called by a finalizer that the sampler "
                               "runs; stop it from another place")
        with self._stop_lock:
            if self.summary is not None or self._stopping:
                return self.summary
            self._stopping = True
            try:
                return self._stop()
            finally:
                self._stopping = False

    def _stop(self):
        interrupted = None

        def step(call):
            # A Ctrl-C while the uploads drain (or at any step) is raised once the stop
            # is done: the window, the summary and on_stop come first. The steps may be
            # called again (the interrupt may come after the call returned).
            nonlocal interrupted
            while True:
                try:
                    return call()
                except KeyboardInterrupt as e:
                    interrupted = e

        try:
            step(lambda: _started.discard(self))
            # A SIGTERM from here on lets this stop write the last window (the
            # recorder's close then kills the process), and so the close must come
            # whatever happens.
            step(lambda: _native._sigterm_closing(self.recorder))
            step(self.sampler.stop)
            sampler = step(self.sampler.stats)
            # The exporter's last export sends the last window to the sinks now, and
            # the uploads drain together (their shutdown_timeout_ms, 2 s, for all), so
            # that the figures below are final (close() then has nothing left to do).
            step(self.recorder.stop)
            step(self.recorder.shutdown_uploads)
            uploads = []
            for u in self.uploads:
                with contextlib.suppress(_native.Error):
                    uploads.append(step(lambda: dict(u.stats(), kind=u.kind)))
            stats = step(self.recorder.stats)
        finally:
            step(self.recorder.close)
        files = []
        if self.out_dir and os.path.isdir(self.out_dir):
            # This process's files: its pid in the name, not there at the start,
            # written since (an earlier process may have had the same pid).
            prefix = "%s.%d." % (self.name, os.getpid())
            since = getattr(self, "_start_ns", 0) - 1_000_000_000
            before = getattr(self, "_files_before", set())
            for f in sorted(os.listdir(self.out_dir)):
                path = os.path.join(self.out_dir, f)
                with contextlib.suppress(OSError):
                    if (f.startswith(prefix) and f not in before and
                            os.stat(path).st_mtime_ns >= since):
                        files.append(path)
        self.summary = {
            # The profiles' "samples" total: a waiting task's ticks recorded as one
            # sample count as many; the CPU time a thread used between ticks, moved to
            # its running stack, counts none.
            "pid": os.getpid(),
            "samples": (stats["samples_flushed"] + sampler["ticks_coalesced"] -
                        sampler["cpu_moved"]),
            "exports": stats["windows_exported"], "files": files,
            "degradations": _degradations(stats, sampler), "stats": stats,
            "sampler": sampler,
            "uploads": uploads,
        }
        if self.on_stop is not None:
            self.on_stop(self.summary)
        if interrupted is not None:
            raise interrupted
        return self.summary

    def _after_fork_child(self):
        self.sampler._after_fork_child()


_DEGRADATIONS = _native.DEGRADATIONS + (
    "samples_dropped_nomem", "samples_dropped_closed", "samples_lost_export",
    "export_failures", "sink_failures", "samples_lost_sink")


def _degradations(stats, sampler):
    """The recorder's degradations, and the labels the library refused the sampler (a
    tag() key it takes for its own, over its max_labels...: left out of samples)."""
    out = {k: stats[k] for k in _DEGRADATIONS if stats.get(k)}
    if sampler.get("labels_refused"):
        out["labels_refused"] = sampler["labels_refused"]
    return out


def _program():
    """The program's name: its script's or module's file name; "python" for a program
    given by `-c` or on stdin (`-`)."""
    name = sys.argv[0] if sys.argv and sys.argv[0] not in ("-", "-c") else ""
    return os.path.basename(name) or "python"


def _pyroscope_app(name):
    """A service or program name as a Pyroscope application name: '_' for each character
    the server refuses in one (it takes A-Z a-z 0-9 _ . -; "my app.py" -> "my_app.py").
    PYROSCOPE_APPLICATION_NAME is taken as it is (the sink refuses a bad one by name)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _tags_text(tags, sep=":"):
    """Tags as "k:v,k:v" (Datadog's syntax) or "k=v,k=v" (sep "=", Pyroscope's). A
    string is in Datadog's syntax (items separated by commas or spaces, as in DD_TAGS
    and --tags); for Pyroscope each item's first ':' becomes '='."""
    if not tags:
        return None
    if isinstance(tags, str):
        if sep == ":":
            return tags
        return ",".join(_pyroscope_tag(t) for t in tags.replace(",", " ").split()) or None
    return ",".join("%s%s%s" % (k, sep, v) for k, v in tags.items())


def _otlp_attributes(tags):
    """OTEL_RESOURCE_ATTRIBUTES, then the tags, as k=v,k=v with values percent-encoded
    (the later of two equal keys is dropped by the encoder: the environment's wins)."""
    items = [os.environ.get("OTEL_RESOURCE_ATTRIBUTES", "")]
    if isinstance(tags, str):
        tags = dict(t.partition(":")[::2] for t in tags.replace(",", " ").split())
    for k, v in (tags or {}).items():
        items.append("%s=%s" % (k, urllib.parse.quote(str(v), safe="")))
    return ",".join(i for i in items if i) or None


def _pyroscope_tag(item):
    """k:v -> k=v; an item already k=v (no ':' before its '=') is kept."""
    colon, equal = item.find(":"), item.find("=")
    if colon < 0 or 0 <= equal < colon:
        return item
    return item[:colon] + "=" + item[colon + 1:]


def start(**options):
    """Starts the process's profiler (see Profiler for the options); returns it. In a
    program that `python -m pprofkit run` profiles, returns the profiler the command
    line started, which goes on with its own options."""
    global _current, _busy
    with _lock:
        if _busy:
            raise RuntimeError("pprofkit: start() called while start() runs in this "
                               "thread (from a signal handler)")
        if _current is not None and _current is _environment:
            return _current
        if _current is not None:
            raise RuntimeError("pprofkit: a profiler is already running")
        _busy = True
        try:
            p = Profiler(**options)
            p.start()  # closes what it made if it fails
            _current = p
            os._exit = _exit_after_stop
            os.execv, os.execve = _execv_after_stop, _execve_after_stop
            # Until the recorder is closed, SIGTERM (when its disposition is the
            # default) writes the last window before it kills the process (the
            # extension's sigterm.c).
            _native._sigterm_arm(p.recorder)
        finally:
            _busy = False
    return p


def stop():
    """Stops the running profiler, if any: its last window is written. Returns its
    summary (a dict), or None (none runs; the command line's runs, which goes on to the
    program's end; or called from a signal handler while this thread's start() is half
    done: that profiler goes on)."""
    return None if _current is not None and _current is _environment else _stop_current()


def _stop_current():
    global _current
    with _lock:
        if _busy:
            return None
        p, _current = _current, None
        if os._exit is _exit_after_stop:
            os._exit = _real_os_exit
        if os.execv is _execv_after_stop:
            os.execv = _real_execv
        if os.execve is _execve_after_stop:
            os.execve = _real_execve
    return p._stop_now() if p is not None else None


def current():
    """The running Profiler, or None."""
    return _current


@contextlib.contextmanager
def profile(**options):
    """`with pprofkit.profile(...) as p:` profiles the block; p.summary after it."""
    p = start(**options)
    try:
        yield p
    finally:
        if _current is p:
            stop()


@contextlib.contextmanager
def tag(labels=None, /, **kw):
    """Adds labels (str or int values) to the samples of the current asyncio task (when
    one runs in this thread) or else of the current thread, while the block runs. An
    inner block's value for a key wins over an outer one's; blocks may end in any order
    (generators). Raises TypeError for a key that is not a str or a value that is not
    a str or an int, ValueError for an empty key, one of the sampler's own labels, an
    int outside 64 bits, the library's reserved key ("end_timestamp_ns"), a "local root
    span id" that is not a non-zero int, or more than 24 labels in the blocks running
    at once."""
    items = {}
    for k, v in dict(labels or {}, **kw).items():
        if not isinstance(k, str) or not isinstance(v, (str, int)) or isinstance(v, bool):
            raise TypeError("pprofkit.tag: keys must be str, values str or int")
        if not k or k in _RESERVED_LABELS:
            raise ValueError("pprofkit.tag: %r cannot be a label's key (empty, one of "
                             "the sampler's own labels, or reserved)" % k)
        if k == _SPAN_KEY and (not isinstance(v, int) or not v):
            raise ValueError("pprofkit.tag: %r must be a non-zero int" % k)
        if isinstance(v, int) and not -2**63 <= v < 2**63:
            raise ValueError("pprofkit.tag: %r: an int value must fit in 64 bits" % k)
        items[_utf8_safe(k)] = _utf8_safe(v) if isinstance(v, str) else v
    task = _current_task()
    table, key = (_tags_task, id(task)) if task is not None else (
        _tags_thread, threading.get_ident())
    if task is None and getattr(_thread_tags, "guard", None) is None:
        _thread_tags.guard = _ThreadTags(key)
    where = (table is _tags_task, key)
    blocks = _tag_blocks.get(where, []) + [items]
    merged = _merged(blocks)
    if len(merged) > _MAX_TAGS:
        raise ValueError("pprofkit.tag: at most %d labels at once" % _MAX_TAGS)
    _tag_blocks[where] = blocks
    table[key] = merged
    try:
        yield
    finally:
        blocks = [b for b in _tag_blocks.get(where, ()) if b is not items]
        if blocks:
            _tag_blocks[where] = blocks
            table[key] = _merged(blocks)
        else:
            _tag_blocks.pop(where, None)
            table.pop(key, None)


def _merged(blocks):
    """The labels of tag() blocks, outermost first, as the sampler reads them."""
    out = {}
    for b in blocks:
        out.update(b)
    return tuple(out.items())


def _utf8_safe(s):
    """s, its lone surrogates (which UTF-8 cannot encode) replaced, once per byte that
    "surrogatepass" would give them (U+FFFD each, as the library repairs invalid UTF-8):
    the sampler reads tags without making objects."""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _current_task():
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running loop in this thread
        return None


def _exit_after_stop(code):
    """os._exit while the process's profiler runs: every profiler stops as at exit
    (their last windows), then the process exits, whatever a stop raised."""
    try:
        _at_exit()
    except BaseException:
        pass
    _real_os_exit(code)


def _exec_after_stop(real, path, *args):
    """An exec replaces the process without its exit handlers: the running profiler
    writes its last window first (the os.exec* functions all call os.execv or
    os.execve). A path that cannot be executed (execvp tries each directory of PATH in
    turn) fails as it would, the profiler still running; an exec that fails past that
    check leaves the program running unprofiled."""
    try:
        # (A file descriptor, as os.execve takes one, is not looked at.)
        if isinstance(path, int) or (os.access(path, os.X_OK) and not os.path.isdir(path)):
            _stop_current()
    except BaseException:  # a Ctrl-C during the stop too: the exec is what was asked
        pass
    return real(path, *args)


def _execv_after_stop(path, argv):
    return _exec_after_stop(_real_execv, path, argv)


def _execve_after_stop(path, argv, env):
    return _exec_after_stop(_real_execve, path, argv, env)


_exit_ran = False  # _at_exit began: an atexit handler registered before ours runs now


def _refuse_after_exit():
    if _exit_ran:
        # Nothing would stop the profiler: no last window, no summary, its threads
        # left running while the interpreter finalizes.
        raise RuntimeError("the interpreter is exiting: pprofkit's exit handler has run, "
                           "so a profiler started now would never be stopped")


def _at_exit():
    """Every profiler and sampler still running stops (their threads must end before
    the interpreter finalizes), whatever another's stop raises; a Ctrl-C while the
    uploads drain is dropped (the process is leaving already), another error raised
    once all are stopped."""
    global _exit_ran
    _exit_ran = True
    error = None
    for stop_one in [_stop_current] + [p._stop_now for p in list(_started)] + [
            _native._stop_samplers]:
        try:
            stop_one()
        except KeyboardInterrupt:
            pass
        except BaseException as e:
            error = error or e
    if error is not None:
        raise error


_forked_by_main = True  # whether the thread that forks last is the main one


def _before_fork():
    global _forked_by_main
    _forked_by_main = threading.current_thread() is threading.main_thread()
    _native._before_fork()
    _lock.acquire()


def _after_fork_parent():
    _lock.release()
    _native._after_fork_parent()


def _after_fork_child():
    global _lock
    _lock = threading.RLock()  # the parent's, held by this thread across the fork
    for p in list(_started):  # another thread of the parent may have held theirs
        p._stop_lock = threading.RLock()
    # Only this thread goes on in the child: the tag() blocks of the others never end
    # here, and a new thread of the child may get one of their idents.
    me = threading.get_ident()
    for ident in [i for i in _tags_thread if i != me]:
        del _tags_thread[ident]
    for where in [w for w in _tag_blocks if not w[0] and w[1] != me]:
        del _tag_blocks[where]
    # The library empties a forked child's recorders itself; the extension forgets the
    # calls other threads of the parent had in progress and the samplers' threads; then
    # every profiler's sampler starts again.
    _native._after_fork_child()
    for p in list(_started):
        p._after_fork_child()
    if not _forked_by_main and (_current is not None or _started):
        _stop_when_ends(threading.current_thread())


def _stop_when_ends(forker):
    """In a child forked by a thread other than the main one, that thread is the only
    one, and when it returns or raises SystemExit CPython ends it alone, running no exit
    handler: the profilers' own threads (samplers, exporters, SIGTERM's) would keep the
    process alive for ever. A thread of the package's waits for it to end, then stops
    the profilers as the exit handler would (the last window, the summary): the process
    then ends as it would without them. No sampler samples that thread: made by _thread
    (no Thread object), it is hidden before it can run, this thread holding the GIL."""
    def wait():
        try:
            forker.join()
        except Exception:  # one that threading cannot join (a dummy thread)
            return
        _at_exit()

    _native._hide_thread(_thread.start_new_thread(wait, ()))


atexit.register(_at_exit)
os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent,
                    after_in_child=_after_fork_child)
