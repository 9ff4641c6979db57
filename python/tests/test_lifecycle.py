"""test_lifecycle.py - the profiler's and the Sampler's life: exit without stop,
concurrent start and stop, fork of a Sampler used directly, the CLI's end of run, nested
tags, and the CLI's argument and exit-code rules.

Programs run in subprocesses (a crash or a hang must not take the suite with it); what
they write is read with protoc (support.decode).
"""

import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import unittest
import zipfile

import pprofkit
import support
from pprofkit import profiler

GUARD = 120  # seconds before a program counts as hung (a hang guard, not a timing)


def run_python(code_or_args, cwd, env_extra=None, expect_rc=0, testcase=None, stdin=None):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith(("PPROFKIT_", "DD_", "PYROSCOPE_")):
            del env[k]
    env.update(env_extra or {})
    args = code_or_args
    if isinstance(code_or_args, str):
        path = os.path.join(cwd, "prog.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(code_or_args))
        args = [path]
    out = subprocess.run([sys.executable] + args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, timeout=GUARD, input=stdin)
    if testcase is not None:
        testcase.assertEqual(out.returncode, expect_rc, out.stderr.decode())
    return out


def profiles(directory):
    found = []
    for path in sorted(glob.glob(os.path.join(directory, "*.pb.gz"))):
        with open(path, "rb") as f:
            found.append(support.decode(f.read()))
    return found


def cpu_by_function(profs):
    out = {}
    for p in profs:
        for fn, v in p.by("cpu-time", lambda stack, labels: stack[0][0]).items():
            out[fn] = out.get(fn, 0) + v
    return out


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SPIN = """
import time
def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass
"""


class ExitTest(unittest.TestCase):
    def test_profiler_left_running_at_exit(self):
        # A Profiler started without pprofkit.start() and never stopped: the exit
        # handler stops it (its thread must end before the interpreter finalizes) and
        # its last window is written.
        with tempfile.TemporaryDirectory() as tmp:
            run_python(SPIN + """
import pprofkit
p = pprofkit.Profiler(out_dir="out")
p.start()
spin(0.3)
""", tmp, testcase=self)
            cpu = cpu_by_function(profiles(os.path.join(tmp, "out")))
            self.assertGreater(cpu.get("spin", 0), 0.1e9, cpu)

    def test_sampler_left_running_at_exit(self):
        with tempfile.TemporaryDirectory() as tmp:
            run_python(SPIN + """
import os, pprofkit
os.mkdir("out")
rec = pprofkit.Recorder([pprofkit.WALL_TIME, pprofkit.CPU_TIME], out_dir="out")
s = pprofkit.Sampler(rec, wall_index=0, cpu_index=1)
s.start()
spin(0.2)
""", tmp, testcase=self)

    def test_start_after_the_exit_handler_refused(self):
        # An atexit handler registered before pprofkit's runs after it: a profiler it
        # started would never be stopped (no last window, no summary). start() raises.
        with tempfile.TemporaryDirectory() as tmp:
            out = run_python("""
import atexit
def late():
    import pprofkit
    try:
        pprofkit.start(out_dir="out")
    except RuntimeError as e:
        print("refused:", e)
    else:
        print("started")
atexit.register(late)
import pprofkit
""", tmp, testcase=self)
            self.assertTrue(out.stdout.decode().startswith("refused: the interpreter is exiting"),
                            out)
            self.assertEqual(os.listdir(tmp), ["prog.py"])

    def test_program_starting_its_own_profiler_under_the_cli(self):
        # A program that calls pprofkit.start()/stop() or profile() itself, run by
        # `python -m pprofkit run` (and, with --subprocesses, as a child of a profiled
        # program): start() returns the command line's profiler, stop() leaves it
        # running (None), and it profiles the program to its end, into the command
        # line's directory (a RuntimeError, "already running", ended the program).
        # The full rate (--cpu-budget 0, passed on to the child): the budget may space a
        # new process's first ticks by up to a second (its first passes cost more, more
        # so under ASan), and a program this short may then have no tick in `spin`.
        prog = SPIN + """
import sys, pprofkit
p = pprofkit.start(out_dir="mine", rate=10)
same = p is pprofkit.current()
with pprofkit.profile(out_dir="mine") as q:
    spin(0.1)
print(same, q is p, pprofkit.stop(), p.stop(), pprofkit.current() is p, flush=True)
def after_stop():
    spin(0.3)
after_stop()
"""
        parent = """
import subprocess, sys
sys.exit(subprocess.run([sys.executable, "prog.py"]).returncode)
"""
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "prog.py"), "w") as f:
                f.write(prog)
            with open(os.path.join(tmp, "parent.py"), "w") as f:
                f.write(parent)
            for args in (["prog.py"], ["--subprocesses", "parent.py"]):
                with self.subTest(args=args):
                    out_dir = os.path.join(tmp, "out-" + args[-1])
                    out = run_python(["-m", "pprofkit", "run", "--cpu-budget", "0",
                                      "--out", out_dir] + args, tmp, testcase=self)
                    self.assertEqual(out.stdout.decode().split(),
                                     ["True"] * 2 + ["None"] * 2 + ["True"])
                    # One summary a process, at its end (none when the program stopped).
                    self.assertEqual(len(out.stderr.decode().splitlines()), len(args))
                    self.assertFalse(os.path.exists(os.path.join(tmp, "mine")))
                    cpu = cpu_by_function(profiles(out_dir))
                    self.assertGreater(cpu.get("spin", 0), 0.2e9, cpu)

    def test_sub_interpreter_refused(self):
        # A sub-interpreter (3.11's kind, 3.12's and 3.13's legacy kind) cannot import
        # the package: a profiler started there kept 3.11 from destroying it, and the
        # process from exiting. programs/subinterp.py destroys it and exits.
        with tempfile.TemporaryDirectory() as tmp:
            prog = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs",
                                "subinterp.py")
            out = run_python([prog, os.path.join(tmp, "out")], tmp, testcase=self)
            self.assertEqual(out.stdout.decode().splitlines(), [
                "refused: pprofkit can only be imported in the main interpreter",
                "destroyed"])
            self.assertFalse(os.path.exists(os.path.join(tmp, "out")))

    def test_cli_profiles_threads_that_outlive_the_script(self):
        # The program's top level returns at once; its non-daemon thread works on, and
        # the interpreter waits for it before exiting: it is profiled to its end, but
        # for the CPU time after its last sample, at most the interval between two ticks
        # that spans its end (the program's atexit handler, which runs before the
        # profiler's, prints the longest interval once two more ticks came).
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "late.py"), "w") as f:
                f.write(SPIN + """
import atexit, threading, time, pprofkit
def late_work():
    spin(0.4)
def report():
    st = pprofkit.current().sampler.stats
    ticks = st()["ticks"]
    deadline = time.monotonic() + 10
    while st()["ticks"] < ticks + 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    print(st()["tick_gap_ns_max"])
atexit.register(report)
threading.Thread(target=late_work).start()
""")
            out = run_python(["-m", "pprofkit", "run", "--out", "out", "late.py"], tmp,
                             testcase=self)
            gap = int(out.stdout.decode().split()[-1])
            cpu = cpu_by_function(profiles(os.path.join(tmp, "out")))
            self.assertGreater(cpu.get("spin", 0), 0.4e9 - gap - 25_000_000, (cpu, gap))


class SamplerRaceTest(unittest.TestCase):
    def test_concurrent_start_and_stop(self):
        # Four threads start and stop one Sampler at once, with the GIL changing hands
        # as often as it can: never two sampling threads, no hang, no crash; at the end
        # no thread is left over.
        with tempfile.TemporaryDirectory() as tmp:
            out = run_python("""
import os, sys, threading, time, pprofkit
sys.setswitchinterval(1e-6)
rec = pprofkit.Recorder([pprofkit.WALL_TIME], out_dir=None)
s = pprofkit.Sampler(rec, rate_hz=1000, wall_index=0)
tasks = lambda: len(os.listdir("/proc/self/task"))
before = tasks()
most = [0]
def hammer():
    for i in range(40):
        s.start()
        most[0] = max(most[0], tasks() - before)
        if i % 3 == 0:
            s.stop()
workers = [threading.Thread(target=hammer) for _ in range(4)]
for w in workers: w.start()
for w in workers: w.join()
s.stop()
# A thread can stay listed in /proc a moment after it was joined (Thread.join returns
# when the thread's Python part is done, before its OS thread has exited): wait for the
# list to settle.
for _ in range(500):
    if tasks() == before:
        break
    time.sleep(0.01)
print(s.running, tasks() - before, most[0])
""", tmp, testcase=self)
            running, left, most = out.stdout.decode().split()
            self.assertEqual(running, "False")
            self.assertEqual(int(left), 0)
            # At most the four hammering threads and one sampling thread, and one more
            # listed for a moment: a sampling thread that stop() joined can still be in
            # /proc/self/task (as the settling loop above says), no longer sampling.
            self.assertLessEqual(int(most), 6)

    def test_sampler_freed_while_the_main_thread_hands_the_gil_over(self):
        # A thread starts, stops and drops Samplers over and over while the main thread
        # runs Python code, handing the GIL over to each one's sampling thread (a pending
        # call that waits without the GIL on the Sampler's condition): a Sampler freed
        # during that wait was used after its free (ASan saw it in 20 s runs). A stress
        # run: the test suite's ASan build is what reports a use after free.
        with tempfile.TemporaryDirectory() as tmp:
            out = run_python("""
import threading, time, pprofkit
types = [pprofkit.WALL_TIME, pprofkit.SAMPLES]
stop = [False]
made = [0]
def churn():
    while not stop[0]:
        r = pprofkit.Recorder(types)
        s = pprofkit.Sampler(r, rate_hz=5000, count_index=1)
        s.start()
        time.sleep(0.002)
        s.stop()
        del s
        r.close()
        made[0] += 1
t = threading.Thread(target=churn)
t.start()
end = time.monotonic() + 4
while time.monotonic() < end:
    sum(i for i in range(1000))
stop[0] = True
t.join()
print(made[0])
""", tmp, testcase=self)
            self.assertGreater(int(out.stdout.decode()), 100)

    def test_sampler_cpu_time(self):
        # stats()["cpu_ns"], the sampling thread's CPU time: read from its clock while it
        # runs (it grows), written when it ends (stop: then it stays), at most the
        # process's CPU time. A child forked while it runs starts from 0 (the figures of
        # a sampler running at the fork are the child's own) and counts its new thread.
        with tempfile.TemporaryDirectory() as tmp:
            out = run_python(SPIN + """
import os, threading, time, pprofkit
rec = pprofkit.Recorder([pprofkit.WALL_TIME, pprofkit.CPU_TIME], out_dir=None)
s = pprofkit.Sampler(rec, rate_hz=1000, wall_index=0, cpu_index=1)
t = threading.Thread(target=spin, args=(0.6,))
t.start()
s.start()
spin(0.2)
c1 = s.stats()["cpu_ns"]
spin(0.2)
c2 = s.stats()["cpu_ns"]
pid = os.fork()
if pid == 0:
    k0 = s.stats()["cpu_ns"]
    s.start()
    spin(0.1)
    k1 = s.stats()["cpu_ns"]
    s.stop()
    k2 = s.stats()["cpu_ns"]
    os._exit(0 if k0 == 0 and 0 < k1 <= k2 else 1)
s.stop()
c3 = s.stats()["cpu_ns"]
time.sleep(0.05)
c4 = s.stats()["cpu_ns"]
proc = time.process_time_ns()
t.join()
_, status = os.waitpid(pid, 0)
print(c1, c2, c3, c4, proc, os.waitstatus_to_exitcode(status))
""", tmp, testcase=self)
            c1, c2, c3, c4, proc, child = map(int, out.stdout.decode().split())
            self.assertGreater(c1, 0)
            self.assertGreater(c2, c1)
            self.assertGreaterEqual(c3, c2)
            self.assertEqual(c4, c3)
            self.assertLess(c3, proc)
            self.assertEqual(child, 0)

    def test_sampler_used_directly_across_fork(self):
        # A Sampler used without the Profiler: in a forked child it has no thread (the
        # package's fork handler forgets the parent's), stop() is harmless, and it
        # starts again.
        with tempfile.TemporaryDirectory() as tmp:
            run_python(SPIN + """
import os, pprofkit
rec = pprofkit.Recorder([pprofkit.WALL_TIME, pprofkit.CPU_TIME], out_dir=None)
s = pprofkit.Sampler(rec, wall_index=0, cpu_index=1)
s.start()
spin(0.05)
pid = os.fork()
if pid == 0:
    ok = not s.running
    s.stop()
    s.start()
    spin(0.1)
    s.stop()
    e = rec.export()
    os._exit(0 if ok and e.stats["samples_added"] > 0 else 1)
_, status = os.waitpid(pid, 0)
s.stop()
raise SystemExit(os.waitstatus_to_exitcode(status))
""", tmp, testcase=self)


class TagTest(unittest.TestCase):
    def test_nested_tags_with_the_same_key(self):
        ident = threading.get_ident()
        # What the sampler reads: each key once (a second pair with the same key would
        # be refused by the library as a duplicate label), the inner value winning.
        with pprofkit.tag(a="outer", b=1):
            self.assertEqual(profiler._tags_thread[ident], (("a", "outer"), ("b", 1)))
            with pprofkit.tag(a="inner"):
                self.assertEqual(profiler._tags_thread[ident], (("a", "inner"), ("b", 1)))
            self.assertEqual(profiler._tags_thread[ident], (("a", "outer"), ("b", 1)))
        self.assertNotIn(ident, profiler._tags_thread)

    def test_tags_ended_out_of_order(self):
        # Blocks in generators end when the generators are closed, in any order: the
        # labels are always those of the blocks still running, and none is left behind.
        ident = threading.get_ident()

        def stream(**labels):
            with pprofkit.tag(**labels):
                yield

        a, b, c = stream(request="A", a=1), stream(request="B"), stream(c=3)
        for g in (a, b, c):
            next(g)
        self.assertEqual(profiler._tags_thread[ident], (("request", "B"), ("a", 1), ("c", 3)))
        a.close()  # the outermost first
        self.assertEqual(profiler._tags_thread[ident], (("request", "B"), ("c", 3)))
        c.close()
        self.assertEqual(profiler._tags_thread[ident], (("request", "B"),))
        b.close()
        self.assertNotIn(ident, profiler._tags_thread)
        self.assertEqual(profiler._tag_blocks, {})

    def test_bad_tags_raise(self):
        ident = threading.get_ident()
        for bad, error in (({"": "x"}, ValueError), ({"thread name": "mine"}, ValueError),
                           ({"task id": 1}, ValueError), ({"big": 2**63}, ValueError),
                           ({"small": -2**63 - 1}, ValueError),
                           ({"k%d" % i: i for i in range(25)}, ValueError),
                           ({"b": True}, TypeError), ({"f": 1.5}, TypeError),
                           ({"n": None}, TypeError),
                           # the library's: it would leave them out of every sample
                           ({"end_timestamp_ns": 5}, ValueError),
                           ({"local root span id": "abc"}, ValueError),
                           ({"local root span id": 0}, ValueError)):
            with self.assertRaises(error, msg=bad):
                with pprofkit.tag(bad):
                    pass
            self.assertNotIn(ident, profiler._tags_thread)
        # The limit counts the labels of the blocks running at once.
        with pprofkit.tag({"k%d" % i: i for i in range(20)}):
            with pprofkit.tag(k0="again", last=-2**63):  # 21 labels
                self.assertEqual(len(profiler._tags_thread[ident]), 21)
            with self.assertRaises(ValueError):
                with pprofkit.tag({"more%d" % i: i for i in range(5)}):
                    pass
            self.assertEqual(len(profiler._tags_thread[ident]), 20)
        self.assertNotIn(ident, profiler._tags_thread)

    def test_tags_of_an_ended_thread_dropped(self):
        # A thread leaves a block open in a generator and ends: its labels go with it
        # (a thread made later may get its ident, and took them). The generator closed
        # later changes nothing.
        gens = []

        def stream():
            with pprofkit.tag(request="from-the-thread"):
                yield

        def run():
            g = stream()
            next(g)
            gens.append(g)
            ident.append(threading.get_ident())
            seen.append(dict(profiler._tags_thread[ident[0]]))

        ident, seen = [], []
        t = threading.Thread(target=run)
        t.start()
        t.join()
        self.assertEqual(seen, [{"request": "from-the-thread"}])
        self.assertNotIn(ident[0], profiler._tags_thread)
        self.assertNotIn((False, ident[0]), profiler._tag_blocks)
        gens[0].close()
        self.assertNotIn(ident[0], profiler._tags_thread)

    def test_tags_open_at_the_interpreters_end(self):
        # Blocks still open when the interpreter ends (a suspended generator's in the
        # main thread, a daemon thread's): their threads' ends drop the labels quietly
        # (the module's dicts may be gone by then).
        with tempfile.TemporaryDirectory() as tmp:
            out = run_python("""
import threading, time, pprofkit
from pprofkit import profiler  # with it, the guards' ends came after the module's
def stream():
    with pprofkit.tag(request="open"):
        yield
g = stream()
next(g)
def daemon():
    with pprofkit.tag(worker="d"):
        time.sleep(60)
threading.Thread(target=daemon, daemon=True).start()
time.sleep(0.1)
print("done")
""", tmp, testcase=self)
            self.assertEqual(out.stdout, b"done\n")
            self.assertEqual(out.stderr, b"")

    def test_forked_child_keeps_only_its_own_thread_tags(self):
        # Threads of the parent inside tag() blocks do not exist in a forked child,
        # where new threads may get their idents: their labels are dropped there.
        with tempfile.TemporaryDirectory() as tmp:
            out = run_python("""
import os, threading, pprofkit
from pprofkit import profiler
inside, done = threading.Barrier(5), threading.Event()
def tagged():
    with pprofkit.tag(request="parent"):
        inside.wait()
        done.wait()
ts = [threading.Thread(target=tagged) for _ in range(4)]
for t in ts: t.start()
inside.wait()
with pprofkit.tag(mine="main"):
    pid = os.fork()
    if pid == 0:
        print(sorted(profiler._tags_thread.values()), len(profiler._tag_blocks), flush=True)
        os._exit(0)
    os.waitpid(pid, 0)
    print(len(profiler._tags_thread), flush=True)
done.set()
for t in ts: t.join()
""", tmp, testcase=self)
            child, parent = out.stdout.decode().splitlines()
            self.assertEqual(child, "[(('mine', 'main'),)] 1")
            self.assertEqual(parent, "5")


class StopTest(unittest.TestCase):
    def test_stop_from_a_signal_handler_during_start(self):
        # A signal handler that calls stop() while this thread's start() holds the
        # module's lock (the handler runs in the middle of start(): here, in the call
        # start() makes last) gets None instead of waiting for ever; the profiler runs
        # on and stops later. Likewise a handler's stop() of a Profiler in the middle of
        # its own stop(), and a handler's start() in the middle of start() raises.
        with tempfile.TemporaryDirectory() as tmp:
            out = run_python("""
import pprofkit
from pprofkit import _native, profiler
arm, closing = _native._sigterm_arm, _native._sigterm_closing
seen = {}
def arm_then_interrupt(recorder):
    arm(recorder)
    seen["stop"] = pprofkit.stop()
    try:
        pprofkit.start(out_dir=None)
    except RuntimeError as e:
        seen["start"] = "RuntimeError"
_native._sigterm_arm = arm_then_interrupt
p = pprofkit.start(out_dir=None)
_native._sigterm_arm = arm
print(seen["stop"], seen["start"], pprofkit.current() is p)
def closing_then_interrupt(recorder):
    closing(recorder)
    seen["inner"] = p.stop()
_native._sigterm_closing = closing_then_interrupt
summary = pprofkit.stop()
print(seen["inner"], type(summary).__name__, p.summary is summary, pprofkit.current())
""", tmp, testcase=self)
            self.assertEqual(out.stdout.decode().split("\n")[:2],
                             ["None RuntimeError True", "None dict True None"])

    def test_concurrent_stops(self):
        # Threads stopping one Profiler at once all get its summary (the later ones
        # wait for the first one's), none an error.
        p = pprofkit.Profiler(out_dir=None)
        p.start()
        got, errors = [], []
        go = threading.Barrier(4)

        def stopper():
            go.wait()
            try:
                got.append(p.stop())
            except Exception as e:  # noqa: BLE001 - the test reports any
                errors.append(e)

        ts = [threading.Thread(target=stopper) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(got), 4)
        self.assertTrue(all(g is p.summary for g in got), got)


class GILStateTest(unittest.TestCase):
    """The sampler's thread holds the GIL with a thread state that the starting thread
    made: CPython's GIL-state API must know it as that thread's, and only that one's."""

    def test_debug_allocators(self):
        # `python -X dev` (PYTHONMALLOC=debug) checks PyGILState_Check() at every
        # allocation. It was false in the sampler's thread on 3.11 (its first pass with
        # another thread: "Fatal Python error: _PyMem_DebugMalloc: Python memory
        # allocator called without holding the GIL"), and in the stopping thread after
        # the stop on 3.12 and later (next item).
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "app.py"), "w") as f:
                f.write(SPIN + textwrap.dedent("""
                    import threading
                    t = threading.Thread(target=spin, args=(0.3,))
                    t.start()
                    spin(0.3)
                    t.join()
                    print("done")
                    """))
            out = run_python(["-X", "dev", "-m", "pprofkit", "run", "--rate", "1000",
                              "--cpu-budget", "0", "--out", "", "app.py"], tmp,
                             testcase=self)
            self.assertEqual(out.stdout.decode(), "done\n")
            self.assertNotIn("Fatal Python error", out.stderr.decode())

    def test_stopping_thread_keeps_its_thread_state(self):
        # On 3.12 and later, deleting the sampler's thread state (at stop, in the thread
        # that stops it) cleared that thread's own GIL-state thread state, the sampler's
        # thread having noted its own: PyGILState_Check() was then false in the
        # stopping thread, and a PyGILState_Ensure() there (ctypes with the GIL held, a
        # C extension's callback) waited for ever for the GIL it held.
        with tempfile.TemporaryDirectory() as tmp:
            out = run_python(SPIN + """
import ctypes, threading
import pprofkit
for _ in range(2):  # a second start and stop too
    pprofkit.start(out_dir=None, rate=1000, cpu_budget=0)
    t = threading.Thread(target=spin, args=(0.2,))
    t.start()
    spin(0.2)
    t.join()
    pprofkit.stop()
    print(ctypes.pythonapi.PyGILState_Check())
if ctypes.pythonapi.PyGILState_Check():  # (else it would wait for ever)
    state = ctypes.pythonapi.PyGILState_Ensure()
    ctypes.pythonapi.PyGILState_Release(state)
    print("ensured")
""", tmp, testcase=self)
            self.assertEqual(out.stdout.decode().split(), ["1", "1", "ensured"])


class FilesTest(unittest.TestCase):
    def test_summary_lists_the_files_whatever_the_name_and_directory(self):
        # A bytes or path-like out_dir, one whose name is not UTF-8, no name (the
        # default, "python") or one with a lone surrogate (repaired, U+FFFD for each
        # byte, as the file is named), and a second profiler with the same name and
        # directory (its files suffixed): the summary lists the files written, and only
        # those. An empty name is refused.
        import pathlib
        with tempfile.TemporaryDirectory() as tmp:
            not_utf8 = os.path.join(os.fsencode(tmp), b"not-utf8-\xff")
            for out_dir, name, prefix in ((os.fsencode(tmp), "b", "b."),
                                          (pathlib.Path(tmp), None, "python."),
                                          (tmp, None, "python."),
                                          (not_utf8, None, "python."),
                                          (tmp, "odd\udc80x", "odd\ufffd\ufffd\ufffdx.")):
                with self.subTest(out_dir=out_dir, name=name):
                    p = pprofkit.Profiler(out_dir=out_dir, name=name, export_period=60)
                    p.start()
                    summary = p.stop()
                    self.assertEqual(len(summary["files"]), 1, summary["files"])
                    self.assertTrue(os.path.basename(summary["files"][0]).startswith(prefix),
                                    summary["files"])
                    self.assertTrue(os.path.exists(summary["files"][0]))
                    self.assertEqual(os.path.dirname(os.fsencode(summary["files"][0])),
                                     os.fsencode(out_dir))
            with self.assertRaises(ValueError):
                pprofkit.Profiler(out_dir=tmp, name="")

    def test_option_types(self):
        for bad in ({"tags": ["a:b"]}, {"rate": True}, {"cpu_budget": False}):
            with self.assertRaises(TypeError, msg=bad):
                pprofkit.Profiler(out_dir=None, **bad)


class CliArgumentsTest(unittest.TestCase):
    def test_datadog_without_url_before_the_script(self):
        # `--datadog app.py`: app.py is the script, not an agent URL; the agent comes from
        # the environment (here a closed port: the upload fails and is counted, the
        # program runs).
        for env in ({}, {"PPROFKIT_DATADOG": "1"}):
            with self.subTest(env=env), tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, "app.py"), "w") as f:
                    f.write("print('app ran')\n")
                args = ["-m", "pprofkit", "run", "--out", "out"]
                args += ["app.py"] if env else ["--datadog", "app.py"]
                env = dict(env, DD_TRACE_AGENT_URL="http://127.0.0.1:%d" % closed_port())
                out = run_python(args, tmp, env_extra=env, testcase=self)
                self.assertEqual(out.stdout.decode().strip(), "app ran")
                self.assertRegex(out.stderr.decode(), r"datadog: 0 sent, 1 dropped")

    def test_bad_option_values(self):
        # A value out of range, or an output directory that cannot be made, is a
        # one-line error (exit status 1) before the program runs, not a traceback.
        for option, words in ((["--rate", "0"], "rate"), (["--max-frames", "1"], "max_frames"),
                              (["--cpu-budget", "-1"], "cpu_budget"),
                              (["--export-period", "inf"], "export_period"),
                              (["--memory-limit", "500K"], "memory_limit"),
                              (["--out", "app.py"], "File exists"),
                              (["--out", "/proc/none"], "No such file")):
            with self.subTest(option=option), tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, "app.py"), "w") as f:
                    f.write("print('app ran')\n")
                out = run_python(["-m", "pprofkit", "run", "--out", "out"] + option +
                                 ["app.py"], tmp, expect_rc=1, testcase=self)
                err = out.stderr.decode()
                self.assertEqual(out.stdout, b"")
                self.assertNotIn("Traceback", err)
                self.assertRegex(err, r"^python -m pprofkit run: .*%s" % words)

    def test_script_after_double_dash(self):
        # `run -- app.py`: -- ends run's options; the program's own -- is its argument.
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "app.py"), "w") as f:
                f.write("import sys; print(sys.argv)\n")
            for args, argv in ((["--", "app.py", "--", "-q"], ["app.py", "--", "-q"]),
                               (["-m", "app", "--"], [os.path.join(tmp, "app.py"), "--"])):
                out = run_python(["-m", "pprofkit", "run", "-q", "--out", ""] + args, tmp,
                                 testcase=self)
                self.assertEqual(out.stdout.decode(), "%r\n" % argv)

    def test_missing_script(self):
        # As python: one line naming the file, exit status 2; the profiler never started.
        with tempfile.TemporaryDirectory() as tmp:
            py, ppk = self.run_both(tmp, ["none.py"], expect_rc=2)
            self.assertEqual(ppk.stderr, py.stderr)
            self.assertRegex(py.stderr.decode(), r"^\S+: can't open file '.*none.py': "
                             r"\[Errno 2\] No such file or directory\n$")
            self.assertFalse(os.path.exists(os.path.join(tmp, "out")))

    def test_missing_module(self):
        # -m of a module that python -m cannot run: python's line, exit status 1; the
        # profiler never started. (A module not there, in a package not there, a
        # package without __main__, a relative name.)
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "pkg"))
            open(os.path.join(tmp, "pkg", "__init__.py"), "w").close()
            for name, line in (
                    ("no_such_module_here", "No module named no_such_module_here"),
                    ("nope.x", "Error while finding module specification for 'nope.x' "
                               "(ModuleNotFoundError: No module named 'nope')"),
                    ("pkg", "No module named pkg.__main__; 'pkg' is a package and "
                            "cannot be directly executed"),
                    (".x", "Relative module names not supported")):
                with self.subTest(name=name):
                    py, ppk = self.run_both(tmp, ["-m", name], expect_rc=1)
                    self.assertEqual(ppk.stderr, py.stderr)
                    self.assertEqual(py.stderr.decode(), "%s: %s\n" % (sys.executable, line))
                    self.assertFalse(os.path.exists(os.path.join(tmp, "out")))
            # A directory without __main__.py, likewise.
            os.mkdir(os.path.join(tmp, "empty"))
            py, ppk = self.run_both(tmp, ["empty"], expect_rc=1)
            self.assertEqual(ppk.stderr, py.stderr)
            self.assertEqual(py.stderr.decode(), "%s: can't find '__main__' module in %r\n"
                             % (sys.executable, os.path.join(tmp, "empty")))
            self.assertFalse(os.path.exists(os.path.join(tmp, "out")))

    def test_summary_never_on_stdout(self):
        # Python started without a stderr (2>&-): no summary (fd 2 may be another file
        # by then), the files written. The program set sys.stderr to None: the summary
        # goes to python's stderr.
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "app.py"), "w") as f:
                f.write("import sys\nif sys.argv[1:]: sys.stderr = None\nprint('data')\n")
            out = subprocess.run(["sh", "-c", '"$0" -m pprofkit run --out out app.py 2>&-',
                                  sys.executable], cwd=tmp, stdout=subprocess.PIPE,
                                 timeout=GUARD)
            self.assertEqual((out.returncode, out.stdout), (0, b"data\n"))
            self.assertEqual(len(glob.glob(os.path.join(tmp, "out", "*.pb.gz"))), 1)
            out = run_python(["-m", "pprofkit", "run", "--out", "out", "app.py", "x"], tmp,
                             testcase=self)
            self.assertEqual(out.stdout, b"data\n")
            self.assertRegex(out.stderr.decode(), r"^pprofkit: pid \d+, .*\n$")

    def test_bad_variables(self):
        # A variable's value that run cannot use is a one-line error naming it (exit
        # status 1) before the program runs; the other commands do not read them.
        for name, value, what in (
                ("PPROFKIT_DATADOG", "maybe", "an agent URL or a boolean"),
                ("PPROFKIT_OTLP", "maybe", "a URL or a boolean"),
                ("PPROFKIT_QUIET", "maybe", "a boolean"),
                ("DD_PROFILING_ENABLED", "2", "a boolean"),
                ("PPROFKIT_RATE", "abc", "a number"),
                ("DD_PROFILING_MAX_TIME_USAGE_PCT", "1%", "a number"),
                ("PPROFKIT_MAX_TASKS_PER_TICK", "1.5", "an integer"),
                ("PPROFKIT_MAX_FRAMES", "x", "an integer"),
                ("PPROFKIT_MEMORY_LIMIT", "lots", "a byte count (64M, ...)"),
                ("PPROFKIT_MEMORY_LIMIT", "1e400", "a byte count (64M, ...)")):
            with self.subTest(name=name), tempfile.TemporaryDirectory() as tmp:
                with open(os.path.join(tmp, "app.py"), "w") as f:
                    f.write("print('app ran')\n")
                out = run_python(["-m", "pprofkit", "run", "app.py"], tmp, {name: value}, 1,
                                 self)
                self.assertEqual(out.stderr.decode(), "python -m pprofkit run: %s must be "
                                 "%s, not %r\n" % (name, what, value))
                self.assertEqual(out.stdout, b"")
                out = run_python(["-m", "pprofkit", "top", "none.pb.gz"], tmp, {name: value},
                                 1, self)
                self.assertEqual(out.stderr.decode(), "python -m pprofkit top: [Errno 2] No "
                                 "such file or directory: 'none.pb.gz'\n")

    def test_boolean_variables(self):
        # Every variable that takes a boolean reads the same words, in any case; for
        # PPROFKIT_DATADOG and PPROFKIT_OTLP a false one means no upload (the program
        # runs), a true one the collector of the environment's variables (here a
        # closed port: the upload fails and is counted).
        env = {"DD_TRACE_AGENT_URL": "http://127.0.0.1:%d" % closed_port(),
               "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:%d" % closed_port()}
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "app.py"), "w") as f:
                f.write("print('app ran')\n")
            # Each word once, the variables in turn: each variable gets both kinds.
            names = ("PPROFKIT_DATADOG", "PPROFKIT_OTLP", "PPROFKIT_QUIET")
            for i, (value, true) in enumerate((
                    ("0", False), ("false", False), ("Off", False), ("no", False),
                    ("1", True), ("TRUE", True), ("on", True), ("yes", True))):
                name = names[i % 3]
                with self.subTest(name=name, value=value):
                    out = run_python(["-m", "pprofkit", "run", "--out", "", "app.py"],
                                     tmp, dict(env, **{name: value}), 0, self)
                    self.assertEqual(out.stdout, b"app ran\n")
                    err = out.stderr.decode()
                    if name == "PPROFKIT_QUIET":
                        self.assertEqual(err == "", true, err)
                        continue
                    self.assertRegex(err, r"^pprofkit: pid \d+, ")
                    self.assertEqual(
                        ", %s: 0 sent, 1 dropped" % name[9:].lower() in err, true, err)

    def test_uploads_off_in_subprocesses_too(self):
        # --datadog=false (or PPROFKIT_DATADOG=0) with DD_PROFILING_ENABLED=1 in the
        # environment, and --otlp=false: neither the program nor its Python children
        # upload (the children took DD_PROFILING_ENABLED, the variable being unset).
        env = {"DD_PROFILING_ENABLED": "1",
               "DD_TRACE_AGENT_URL": "http://127.0.0.1:%d" % closed_port()}
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "kinds.py"), "w") as f:
                f.write("import pprofkit; print([u.kind for u in pprofkit.current().uploads])\n")
            with open(os.path.join(tmp, "parent.py"), "w") as f:
                f.write("import subprocess, sys\n"
                        "subprocess.run([sys.executable, 'kinds.py'], check=True)\n"
                        "import kinds\n")
            for cli, extra in ((["--datadog=false", "--otlp=false"], {}),
                               ([], {"PPROFKIT_DATADOG": "0", "PPROFKIT_OTLP": "off"})):
                with self.subTest(cli=cli, env=extra):
                    out = run_python(["-m", "pprofkit", "run", "-q", "--out", "",
                                      "--subprocesses"] + cli + ["parent.py"], tmp,
                                     dict(env, **extra), 0, self)
                    self.assertEqual(out.stdout.decode().split(), ["[]", "[]"])

    def run_both(self, tmp, args, cli=("--out", "out"), expect_rc=0, env=None):
        """The program run by python and by `python -m pprofkit run`, in tmp: (python's
        result, the CLI's)."""
        py = run_python(args, tmp, env, expect_rc, self)
        ppk = run_python(["-m", "pprofkit", "run"] + list(cli) + args, tmp, env, expect_rc,
                         self)
        return py, ppk

    def test_script_module_as_python_makes_it(self):
        # What `python dir/app.py` gives the script: __file__ absolute (a program that
        # changes directory finds its files next to itself), __package__ None, its own
        # module in sys.modules, sys.argv[0] as typed, sys.path[0] the script's real
        # directory (a symbolic link resolved).
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "real"))
            with open(os.path.join(tmp, "real", "data.txt"), "w") as f:
                f.write("data next to the script")
            with open(os.path.join(tmp, "real", "app.py"), "w") as f:
                f.write(textwrap.dedent("""\
                    import json, os, sys
                    here = os.path.dirname(__file__)
                    os.chdir("/")
                    with open(os.path.join(here, "data.txt")) as f:
                        data = f.read()
                    print(json.dumps([__file__, __package__, __spec__, __cached__,
                                      type(__loader__).__name__,
                                      sys.modules["__main__"].__dict__ is globals(),
                                      sys.argv, sys.path[0], data]))
                    """))
            os.symlink("real", os.path.join(tmp, "link"))
            for script in ("real/app.py", "link/app.py"):
                with self.subTest(script=script):
                    py, ppk = self.run_both(tmp, [script, "x"], ("-q", "--out", ""))
                    self.assertEqual(ppk.stdout, py.stdout)
                    self.assertEqual(json.loads(ppk.stdout)[0],
                                     os.path.join(tmp, script))

    def test_module_as_python_makes_it(self):
        # What `python -m mod` gives the module (and a package's __main__, and `python
        # DIR` or `python ZIP` their __main__.py): its spec, __file__, __package__ and
        # __cached__, sys.argv[0] (its file; the directory or zip file as typed), its own
        # module in sys.modules["__main__"], and that module stays there after its code
        # returned: an exit handler finds it, and pickles its classes.
        program = textwrap.dedent("""\
            import atexit, json, pickle, sys
            class Point:
                pass
            g = globals()
            print(json.dumps([__name__, __file__, __package__, __spec__.name, __cached__,
                              type(__loader__).__name__, sys.argv,
                              sys.modules["__main__"].__dict__ is g]))
            def at_exit():
                print(sys.modules["__main__"].__dict__ is g,
                      type(pickle.loads(pickle.dumps(Point()))) is Point)
            atexit.register(at_exit)
            """)
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(os.path.join(tmp, "pkg"))
            open(os.path.join(tmp, "pkg", "__init__.py"), "w").close()
            os.mkdir(os.path.join(tmp, "app"))
            for path in ("mod.py", os.path.join("pkg", "__main__.py"),
                         os.path.join("app", "__main__.py")):
                with open(os.path.join(tmp, path), "w") as f:
                    f.write(program)
            with zipfile.ZipFile(os.path.join(tmp, "app.zip"), "w") as z:
                z.writestr("__main__.py", program)
            for args in (["-m", "mod"], ["-m", "pkg"], ["app"], ["./app"], ["app.zip"]):
                with self.subTest(args=args):
                    py, ppk = self.run_both(tmp, args + ["x"], ("-q", "--out", ""))
                    self.assertEqual(ppk.stdout, py.stdout)
                    self.assertEqual(py.stdout.decode().splitlines()[1], "True True")

    def test_program_on_stdin(self):
        # `python - x`: the program read from stdin, sys.argv[0] "-", __file__ "<stdin>",
        # sys.path[0] "", tracebacks from "<stdin>".
        program = textwrap.dedent("""\
            import json, sys
            print(json.dumps([sys.argv, sys.path[0], __file__, __spec__, __package__,
                              __cached__, sys.modules["__main__"].__dict__ is globals()]))
            raise ValueError("from stdin")
            """).encode()
        with tempfile.TemporaryDirectory() as tmp:
            py = run_python(["-", "x"], tmp, None, 1, self, stdin=program)
            ppk = run_python(["-m", "pprofkit", "run", "--out", "out", "-", "x"], tmp, None,
                             1, self, stdin=program)
            self.assertEqual(ppk.stdout, py.stdout)
            self.assertEqual(json.loads(py.stdout)[:3], [["-", "x"], "", "<stdin>"])
            lines = ppk.stderr.decode().splitlines()
            self.assertEqual("\n".join(lines[:-1]) + "\n", py.stderr.decode())
            self.assertIn('File "<stdin>", line 4, in <module>', py.stderr.decode())
            self.assertEqual(len(glob.glob(os.path.join(tmp, "out", "*.pb.gz"))), 1)

    def test_program_name(self):
        # The default service name (OTLP, Pyroscope): the script's or module's file name,
        # "python" for a program given by -c or on stdin.
        saved = sys.argv
        try:
            for argv, name in ((["/srv/app.py", "x"], "app.py"), (["-"], "python"),
                               (["-c", "x"], "python"), ([""], "python"), ([], "python")):
                sys.argv = argv
                self.assertEqual(profiler._program(), name, argv)
        finally:
            sys.argv = saved

    def test_uncaught_exception_through_sys_excepthook(self):
        # The program's sys.excepthook gets its uncaught exception with the traceback
        # that python gives it (from the program's frames: none of pprofkit's or
        # runpy's); without a hook, stderr has python's report, then the summary line.
        # Exit status 1 as with python.
        hook = textwrap.dedent("""\
            import sys, traceback
            def hook(t, v, tb):
                print("hook", t.__name__, v, [(f.name, f.lineno)
                                              for f in traceback.extract_tb(tb)])
                print("last", sys.last_traceback is tb, sys.excepthook is hook)
            sys.excepthook = hook
            """)
        fail = "def fail():\n    raise RuntimeError('boom')\nfail()\n"
        with tempfile.TemporaryDirectory() as tmp:
            for name, text in (("hook.py", hook + fail), ("plain.py", fail)):
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(text)
            py, ppk = self.run_both(tmp, ["hook.py"], expect_rc=1)
            self.assertEqual(ppk.stdout, py.stdout)
            self.assertEqual(py.stdout.decode().splitlines(), [
                "hook RuntimeError boom [('<module>', 9), ('fail', 8)]", "last True True"])
            py, ppk = self.run_both(tmp, ["plain.py"], expect_rc=1)
            lines = ppk.stderr.decode().splitlines()
            self.assertRegex(lines[-1], r"^pprofkit: pid \d+, ")
            self.assertEqual("\n".join(lines[:-1]) + "\n", py.stderr.decode())
            # -m: from the module's frames too (python -m shows two of runpy's first).
            ppk = run_python(["-m", "pprofkit", "run", "-q", "--out", "", "-m", "plain"],
                             tmp, expect_rc=1, testcase=self)
            self.assertEqual(ppk.stderr.decode().splitlines()[:2], [
                "Traceback (most recent call last):",
                '  File "%s", line 3, in <module>' % os.path.join(tmp, "plain.py")])

    def test_keyboard_interrupt_dies_of_sigint(self):
        # As python does since 3.8: the traceback, the exit handlers (the profiler's
        # last window and summary), then death by SIGINT.
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "app.py"), "w") as f:
                f.write("raise KeyboardInterrupt\n")
            py, ppk = self.run_both(tmp, ["app.py"], expect_rc=-signal.SIGINT)
            lines = ppk.stderr.decode().splitlines()
            self.assertRegex(lines[-1], r"^pprofkit: pid \d+, .* 1 files in ")
            self.assertEqual("\n".join(lines[:-1]) + "\n", py.stderr.decode())
            self.assertEqual(len(glob.glob(os.path.join(tmp, "out", "*.pb.gz"))), 1)


if __name__ == "__main__":
    unittest.main()
