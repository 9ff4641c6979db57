"""test_profiler.py - the sampling profiler end to end (issue 11): real Python programs run
under `python -m pprofkit run` (or start the profiler themselves), and the files they
leave are read by protoc (support.decode) and `go tool pprof`.

The programs are in programs/; each prints what it measured about itself (lifetimes and
CPU time of its threads, its tasks' CPU time, pids) as JSON lines on stdout.

Tolerances come from the sampler's design (python/src/sampler*.c), not from timing:
- A thread's wall time is the sum of the intervals between its samples. Its first sample
  counts from the tick before it, when it did not run yet; the interval from its last
  sample to its end is not recorded. So wall - lifetime lies within one interval between
  two ticks, either way. Deadlines are drawn from 0.5 to 1.5 periods apart; a tick can
  then wait for the GIL (the program reports the sampler's longest wait, gil_wait_ns_max)
  and for a CPU (a loaded machine: the sampler reports the longest time between two of
  its ticks, tick_gap_ns_max, or the one still open when the program read the
  statistics, and 25 ms more are allowed). Besides, the thread's life as
  the sampler sees it begins at its bootstrap frames, a little before the program's own
  clock reading, and ends a little after the last one; either can wait for the GIL once
  more. Hence INTERVAL = the larger of 1.5 periods + GIL wait and the longest gap, + 25
  ms, and |wall - lifetime| <= INTERVAL + GIL wait. The threads program shortens the GIL's switch interval to 1 ms
  (sys.setswitchinterval) so that GIL waits, and the tolerance, stay small.
- CPU time: a thread's first sample carries its whole CPU clock, then each sample the
  growth since the previous one; the last interval's is lost. So the profile's CPU time
  of a thread is at most its CPU clock at the end (plus a few bytecodes after the
  reading: 5 ms) and at least that minus one interval's CPU (<= INTERVAL).
No assertion is about speed; GUARD is a hang guard only.
"""

import collections
import errno
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import pprofkit
import support

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(pprofkit.__file__)))
GUARD = 120  # seconds a program may take before it counts as hung (hang guard only)
MS = 1000000

UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")

FILE_RE = re.compile(r"^python\.(\d+)\.(\d+)(?:-\d+)?\.pb\.(gz|zst)$")

# Configuration the profiler reads from the environment: cleared for every program, so
# that only what a test sets applies.
ENV_PREFIXES = ("PPROFKIT_", "DD_", "PYROSCOPE_")


def leaf(stack):
    return stack[0][0] if stack else None


class Run:
    """A finished program: exit status, stdout, stderr, and the profile files it left
    in out_dir (sorted by pid, then sequence number)."""

    def __init__(self, rc, out, err, out_dir):
        self.rc, self.out, self.err, self.out_dir = rc, out, err, out_dir
        names = sorted(os.listdir(out_dir)) if out_dir and os.path.isdir(out_dir) else []
        self.unknown = [n for n in names if not FILE_RE.match(n)]
        parsed = [(int(m.group(1)), int(m.group(2)), n)
                  for n in names for m in [FILE_RE.match(n)] if m]
        self.files = [os.path.join(out_dir, n) for _, _, n in sorted(parsed)]

    def json(self):
        """The JSON lines of stdout."""
        return [json.loads(l) for l in self.out.splitlines() if l.startswith("{")]

    def pid_files(self, pid):
        return [f for f in self.files if FILE_RE.match(os.path.basename(f)).group(1) ==
                str(pid)]

    def summary_lines(self):
        return [l for l in self.err.splitlines() if l.startswith("pprofkit:")]


def spin_for(seconds):
    """Computes for `seconds` of this thread's CPU time; returns the CPU time (ns)."""
    c0 = time.thread_time_ns()
    end = c0 + int(seconds * 1e9)
    while time.thread_time_ns() < end:
        pass
    return time.thread_time_ns() - c0


# Files decoded lately, by (path, mtime, size): a test and check_summary() read the same
# files (decoding the larger runs' twice took ~8 s of a 27 s test).
_decoded = collections.OrderedDict()
DECODED_KEPT = 64


def load(files):
    """The files decoded by protoc, in order (the same Profile objects for a file read
    again unchanged: not to be modified)."""
    keys = []
    for f in files:
        st = os.stat(f)
        keys.append((os.path.abspath(f), st.st_mtime_ns, st.st_size))
    new = [k for k in dict.fromkeys(keys) if k not in _decoded]
    datas = []
    for path, _, _ in new:
        with open(path, "rb") as fh:
            datas.append(fh.read())
    _decoded.update(zip(new, support.decode_many(datas)))
    found = [_decoded[k] for k in keys]
    while len(_decoded) > max(DECODED_KEPT, len(keys)):
        _decoded.popitem(last=False)
    return found


def merged_by(profiles, type_name, key):
    out = collections.Counter()
    for p in profiles:
        for k, v in p.by(type_name, key).items():
            out[k] += v
    return out


def samples_of(profiles):
    for p in profiles:
        for stack, labels, values in p.samples:
            yield p, stack, labels, values


def longest_gap(sampler, now_ns):
    """The longest time between two ticks from the sampler's statistics read at now_ns
    (time.monotonic_ns()), the one still open then (since the last tick) included."""
    return max(sampler["tick_gap_ns_max"],
               now_ns - max(sampler["last_tick_ns"], sampler["started_ns"]))


def longest_interval(rate, sampler, now_ns):
    """INTERVAL of the opening comment: the longest interval between two ticks, from the
    rate and the sampler's statistics read at now_ns."""
    return max(int(1.5e9 / rate) + sampler["gil_wait_ns_max"],
               longest_gap(sampler, now_ns)) + 25 * MS


class ProfilerTest(unittest.TestCase):
    def tmpdir(self):
        d = tempfile.mkdtemp(prefix="ppk-prof-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def env(self, extra=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIXES)}
        path = env.get("PYTHONPATH")
        env["PYTHONPATH"] = PACKAGE_DIR + (os.pathsep + path if path else "")
        env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in programs/
        env.update(extra or {})
        return env

    def run_python(self, args, out_dir=None, env=None, cwd=None, expect_rc=0):
        """Runs `python args...`; fails if it hangs (killed after GUARD seconds) or ends
        with another status than expect_rc. Returns a Run."""
        proc = subprocess.Popen([sys.executable] + args, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self.env(env),
                                cwd=cwd or PROGRAMS, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=GUARD)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            self.fail("%r hung (killed after %d s); stderr:\n%s" % (
                args, GUARD, err.decode(errors="replace")[-3000:]))
        run = Run(proc.returncode, out.decode(), err.decode(errors="replace"), out_dir)
        if expect_rc is not None:
            self.assertEqual(run.rc, expect_rc, "%r: stderr:\n%s" % (args, run.err[-3000:]))
        if out_dir:
            self.assertEqual(run.unknown, [], "unexpected files in the output directory")
        return run

    def cli(self, args, out_dir=None, **kw):
        """`python -m pprofkit run --out DIR args...` (a new DIR unless given). Tests that
        sample at a high rate to stress the sampler also pass --cpu-budget 0: the budget
        would space their ticks out (a tick costs 0.5-1 ms under ASan)."""
        out_dir = out_dir or self.tmpdir()
        return self.run_python(["-m", "pprofkit", "run", "--out", out_dir] + args,
                               out_dir=out_dir, **kw)

    def check_summary(self, run, pids=None):
        """One summary line on stderr per process that ran the profiler (a forked child
        prints its own): the process's pid and file count, no degradation, and as many
        samples as its files hold (the samples flushed, with the ticks a waiting task's
        sample counts besides its own: every sample flushed is in exactly one exported
        profile). pids: the processes expected (default: one line, any pid)."""
        lines = run.summary_lines()
        if pids is None:
            self.assertEqual(len(lines), 1, run.err)
        else:
            self.assertEqual(len(lines), len(pids), run.err)
        seen = set()
        for line in lines:
            m = re.match(r"^pprofkit: pid (\d+), (\d+) samples, (\d+) exports, (\d+) files",
                         line)
            self.assertTrue(m, line)
            pid = int(m.group(1))
            seen.add(pid)
            files = run.pid_files(pid)
            self.assertEqual(int(m.group(4)), len(files), line)
            self.assertIn("no degradations", line)
            self.assertEqual(sum(p.total("samples") for p in load(files)), int(m.group(2)),
                             line)
        if pids is not None:
            self.assertEqual(seen, set(pids), run.err)

    def assert_near(self, actual, expected, tol, what):
        self.assertLessEqual(abs(actual - expected), tol,
                             "%s: %.1f ms, expected %.1f ms +- %.1f ms" % (
                                 what, actual / MS, expected / MS, tol / MS))


class TestThreads(ProfilerTest):
    """Issue 11: every thread with its name and its hot function; a sleeping thread's
    CPU time ~ 0 and wall time ~ its run time; wall time per thread ~ its lifetime."""

    def test_threads(self):
        run = self.cli(["threads.py", "1.5"])
        (me,) = run.json()
        threads = me["threads"]
        self.assertEqual(len(run.files), 1, run.files)  # export period 60 s: the last one
        self.check_summary(run)
        profiles = load(run.files)
        (p,) = profiles
        self.assertEqual(p.sample_types, [pprofkit.WALL_TIME, pprofkit.CPU_TIME,
                                          pprofkit.SAMPLES])
        self.assertEqual(p.period, 10 * MS)

        # Every thread, with its name, ident and native id.
        ids = {}
        for _, stack, labels, _ in samples_of(profiles):
            name = labels.get("thread name")
            if name is None:  # a thread not yet in threading's table: its bootstrap
                self.assertTrue(stack[0][1].endswith("threading.py"), stack)
                continue
            ids.setdefault(name, set()).add((labels.get("thread id"),
                                             labels.get("thread native id")))
        self.assertEqual(set(ids), set(threads) | {"MainThread"})
        for name, t in threads.items():
            self.assertEqual(ids[name], {(t["ident"], t["native_id"])}, name)

        # Each worker's hottest leaf by CPU time is its own function.
        hot = {"worker-alpha": "alpha_hot", "worker-beta": "beta_hot",
               "worker-gamma": "gamma_hot"}
        cpu_by_leaf = merged_by(profiles, "cpu-time",
                                lambda s, l: (l.get("thread name"), leaf(s)))
        for name, fn in hot.items():
            mine = {f: v for (t, f), v in cpu_by_leaf.items() if t == name}
            self.assertEqual(max(mine, key=mine.get), fn, (name, mine))
        # go tool pprof agrees: the three hot functions are the top three by CPU time.
        if support.go_available():
            flat, text = support.go_top(run.files[0], "cpu-time")
            top = sorted(flat, key=flat.get, reverse=True)[:3]
            self.assertEqual(sorted(top), sorted(hot.values()), text)

        # Wall and CPU time per thread against what each thread measured of itself.
        gil_wait = me["sampler"]["gil_wait_ns_max"]
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        wall = merged_by(profiles, "wall-time", lambda s, l: l.get("thread name"))
        cpu = merged_by(profiles, "cpu-time", lambda s, l: l.get("thread name"))
        report = {n: (round(wall[n] / MS, 1), round(t["lifetime_ns"] / MS, 1),
                      round(cpu[n] / MS, 1), round(t["cpu_total_ns"] / MS, 1))
                  for n, t in threads.items()}
        tol = interval + gil_wait
        for name, t in threads.items():
            self.assert_near(wall[name], t["lifetime_ns"], tol,
                             "%s wall time vs lifetime (%r)" % (name, report))
            # CPU: at most its clock at the end (plus a few bytecodes after the reading),
            # at least that minus one interval's CPU.
            self.assertLessEqual(cpu[name], t["cpu_total_ns"] + 5 * MS, (name, report))
            self.assertGreaterEqual(cpu[name], t["cpu_total_ns"] - interval, (name, report))
        # The sleeping thread: CPU time ~ 0 (it wakes 20 times a second for a few
        # microseconds: its own clock says 2-5 ms, 23 ms under ASan), wall time ~ the run
        # time (checked above); its CPU time above matches its clock.
        self.assertLess(cpu["sleeper"], wall["sleeper"] / 50, report)
        # The main thread (joining) ran from the profiler's start to its stop: the
        # profile's duration, less at most the last interval.
        self.assert_near(wall["MainThread"], p.duration_nanos, interval,
                         "MainThread wall time vs the profile's duration")
        self.assertLess(cpu["MainThread"], 50 * MS, report)
        # On 3.12 and later the GIL's holder, a busy worker at most ticks, gathers the
        # pass itself (the checks above are on what it gathered); 3.11 has no way.
        st = me["sampler"]
        if sys.version_info >= (3, 12):
            self.assertGreater(st["holder_passes"], st["ticks"] // 4, st)
        else:
            self.assertEqual(st["holder_passes"], 0, st)
        print("\n  threads (wall, lifetime, cpu, cpu clock; ms): %r; main %.1f, duration "
              "%.1f; INTERVAL %.1f ms, GIL wait max %.1f ms" % (
                  report, wall["MainThread"] / MS, p.duration_nanos / MS, interval / MS,
                  gil_wait / MS), file=sys.stderr)


    def test_busy_main_and_threads(self):
        # The main thread computes too. It samples itself (main_callback) when it holds
        # the GIL at a tick; on CPython 3.12 and later a thread that holds the GIL runs
        # the other threads' pass itself (a holder pass), and that may be the main
        # thread (the GIL passed to it before the worker asked reached a bytecode
        # boundary), which then samples itself in the pass: never twice in one tick, so
        # no thread has more samples than there were ticks. Every computing thread, the
        # main one included, has its wall time ~ its lifetime, its CPU time ~ its clock,
        # and its own function as its hottest leaf.
        run = self.cli(["threads.py", "1.5", "main-busy"])
        me, end = run.json()
        self.check_summary(run)
        profiles = load(run.files)
        (p,) = profiles
        st = me["sampler"]
        interval = longest_interval(me["rate"], st, me["now_ns"])
        tol = interval + st["gil_wait_ns_max"]
        by = lambda kind: merged_by(profiles, kind, lambda s, l: l.get("thread name"))
        wall, cpu, count = by("wall-time"), by("cpu-time"), by("samples")
        # The workers ended before the program printed its statistics; the main thread
        # is sampled until the profiler stops: its bound is the final tick count.
        final_ticks = end["at_stop"]["ticks"]
        for name, n in count.items():
            self.assertLessEqual(n, final_ticks if name == "MainThread" else st["ticks"],
                                 (name, dict(count), st, final_ticks))
        cpu_by_leaf = merged_by(profiles, "cpu-time",
                                lambda s, l: (l.get("thread name"), leaf(s)))
        hot = {"worker-alpha": "alpha_hot", "worker-beta": "beta_hot",
               "worker-gamma": "gamma_hot", "MainThread": "main_hot"}
        threads = me["threads"]
        report = {n: (round(wall[n] / MS, 1), round(t["lifetime_ns"] / MS, 1),
                      round(cpu[n] / MS, 1), round(t["cpu_ns"] / MS, 1))
                  for n, t in threads.items()}
        for name, fn in hot.items():
            mine = {f: v for (t, f), v in cpu_by_leaf.items() if t == name}
            self.assertEqual(max(mine, key=mine.get), fn, (name, mine))
            # The main thread's CPU clock counts the interpreter's start-up too: its CPU
            # in the profile is bounded by the CPU of its body from below.
            self.assertLessEqual(cpu[name], threads[name]["cpu_total_ns"] + 5 * MS,
                                 (name, report))
            self.assertGreaterEqual(cpu[name], threads[name]["cpu_ns"] - interval,
                                    (name, report))
            if name != "MainThread":
                self.assert_near(wall[name], threads[name]["lifetime_ns"], tol,
                                 "%s wall time vs lifetime (%r)" % (name, report))
        self.assert_near(wall["MainThread"], p.duration_nanos, tol,
                         "MainThread wall time vs the profile's duration (%r)" % report)
        if sys.version_info >= (3, 12):
            self.assertGreater(st["holder_passes"], 0, st)
        else:
            self.assertEqual(st["holder_passes"], 0, st)
        print("\n  busy main: (wall, lifetime, cpu, cpu of body; ms) %r; holder passes "
              "%d of %d ticks" % (report, st["holder_passes"], st["ticks"]), file=sys.stderr)

    def test_main_alone(self):
        # A main thread alone samples itself at every tick (its callback), the tick then
        # needing no pass. Running Python code (holding the GIL) without asyncio tasks,
        # it is not waited for (a wake-up saved a tick): but at a few ticks of start-up,
        # which may find it in a call that lets the GIL go (reading the program), and
        # have passes (the first; on 3.12, 3 of 43 in a CI run); with tasks it is, since
        # the callback reads them.
        run = self.cli(["alone.py", "0.5"])
        alone, loop = (r["sampler"] for r in run.json())
        self.check_summary(run)
        report = (alone, loop)
        self.assertGreaterEqual(alone["ticks_without_gil"], alone["ticks"] - 5, report)
        self.assertLessEqual(alone["main_answers_awaited"], 5, report)
        ticks = loop["ticks"] - alone["ticks"]
        awaited = loop["main_answers_awaited"]
        # The first tick after the tasks appeared was not told of them yet.
        self.assertGreaterEqual(awaited, ticks // 2, report)
        waiting = merged_by(load(run.files), "wall-time",
                            lambda s, l: (l.get("task name"), l.get("task state")))
        self.assertGreater(waiting.get(("waiter", "waiting"), 0), 0.2e9, waiting)

    def test_main_alone_napping(self):
        # A main thread alone computing 3 ms and sleeping 5 ms in turn. A tick that finds
        # it sleeping (the GIL released) waits for its answer, and samples it where it
        # sleeps when none comes: its CPU time goes to where it runs. (Not waited for,
        # it answered as the sleep returned, on the sleep's stack, with the CPU time of
        # the work before: about half of it went to nap().)
        run = self.cli(["naps.py", "1.5", "0.003", "0.005"])
        (me,) = run.json()
        self.check_summary(run)
        cpu = merged_by(load(run.files), "cpu-time", lambda s, l: leaf(s))
        report = ({f: round(v / MS, 1) for f, v in cpu.items()}, me["work_cpu_ns"] / MS,
                  me["sampler"])
        self.assertLess(cpu["nap"], 0.3 * (cpu["work"] + cpu["nap"]), report)
        self.assertGreater(me["sampler"]["main_answers_awaited"], 0, report)

    def test_many_running_threads(self):
        # Eight CPU-bound threads (four to a CPU here), then each idles LINGER (0.5 s,
        # ~50 ticks) before it ends: the profile
        # holds all the CPU time its clock says it spent computing, none lost, none
        # twice. Bounds: above, its clock after its wait (cpu_end_ns) and the few
        # instructions after that reading; below, its body's CPU time (cpu_ns), with
        # 0.5 ms of slack: what a thread spends starting, before its body, may be partly
        # missed (0.2-0.6 ms of the 0.2-0.9 ms it took, here).
        run = self.cli(["threads.py", "1.5", "crowd"])
        me = self.check_crowd(run)
        st = me["sampler"]
        # The same few frames at every tick: each computed once (its line), then found in
        # the frame cache (27-34 misses for ~1,400 samples of ~6 frames, here).
        self.assertGreater(st["frame_cache_misses"], 0, st)
        self.assertLess(st["frame_cache_misses"], st["samples"] // 4, st)

    def test_cpu_budget(self):
        # The crowd of test_many_running_threads under --cpu-budget 0.25: ticks come
        # later so that sampling (the sampler thread's CPU time, and the passes that the
        # main thread and the GIL's holder ran for it, as the budget charges them) takes
        # at most 0.25% of a core: by construction at most 0.25% of (the time since the
        # start + 4 periods + what the budget is owed then, budget_owed_ns), plus the
        # cost of the tick in progress and of the thread's start (2 ms of slack: a tick
        # with eight running threads costs 0.1-0.3 ms here, ~1 ms under ASan). Without
        # the budget it takes 0.6-1% here. The profile still
        # holds every thread's CPU time: the threads linger 1 s (ticks ~70 ms apart here,
        # up to ~300 ms under ASan), so that each is sampled idle after its work.
        budget = 0.25
        run = self.cli(["--cpu-budget", str(budget), "threads.py", "1.5", "crowd", "1.0"])
        me = self.check_crowd(run)
        st = me["sampler"]
        spent = st["cpu_ns"] + st["holder_ns_total"] + st["main_callback_charged_ns_total"]
        span = me["now_ns"] - st["started_ns"]
        report = ("sampling CPU %.2f ms in %.0f ms, %d ticks, %d later for the budget"
                  % (spent / MS, span / MS, st["ticks"], st["ticks_slowed"]))
        self.assertGreater(st["ticks_slowed"], 0, report)
        owed = st["budget_owed_ns"]
        self.assertLessEqual(spent, budget / 100 * (span + 4e9 / me["rate"] + owed) + 2 * MS,
                             report + ", %.0f ms owed" % (owed / MS))
        (line,) = run.summary_lines()
        self.assertIn("ticks later for the CPU budget", line)
        print("\n  cpu budget %.2f%%: %s" % (budget, report), file=sys.stderr)

    def check_crowd(self, run):
        """What test_many_running_threads checks of a run of threads.py crowd; returns
        what the program printed."""
        (me,) = run.json()
        self.check_summary(run)
        profiles = load(run.files)
        st = me["sampler"]
        threads = me["threads"]
        cpu = merged_by(profiles, "cpu-time", lambda s, l: l.get("thread name"))
        cpu_by_leaf = merged_by(profiles, "cpu-time",
                                lambda s, l: (l.get("thread name"), leaf(s)))
        report = {n: (round(cpu.get(n, 0) / MS, 1), round(t["cpu_ns"] / MS, 1),
                      round(t["cpu_end_ns"] / MS, 1)) for n, t in threads.items()}
        hot = {"worker-alpha": "alpha_hot", "worker-beta": "beta_hot",
               "worker-gamma": "gamma_hot"}
        hot.update({"crowd-%d" % i: "crowd_hot" for i in range(5)})
        for name, fn in hot.items():
            t = threads[name]
            self.assertGreaterEqual(cpu[name], t["cpu_ns"] - MS // 2, (name, report))
            self.assertLessEqual(cpu[name], t["cpu_end_ns"] + 5 * MS, (name, report))
            mine = {f: v for (n, f), v in cpu_by_leaf.items() if n == name}
            self.assertEqual(max(mine, key=mine.get), fn, (name, mine))
        self.assertLess(cpu["sleeper"], 50 * MS, report)
        print("\n  crowd (cpu, cpu of body, cpu clock as it ends; ms): %r; %d frame cache "
              "misses, %d samples" % (report, st["frame_cache_misses"], st["samples"]),
              file=sys.stderr)
        return me

    def test_keys_with_python_eq(self):
        # Threads keep, ahead of "_name" in their __dict__, a key of the same hash whose
        # __eq__ is Python code that sleeps: a lookup of "_name" that compared it would
        # run that code in the middle of a pass and let the GIL go (thread states the
        # pass holds were then freed under it: ASan saw the use after free). The
        # sampler reads the names all the same, and never calls that __eq__.
        run = self.cli(["eqkeys.py", "1.5"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertGreater(me["sampler"]["ticks"], 20, me["sampler"])
        self.assertGreater(me["started"], 100, me)
        self.assertEqual(me["calls"], 0, me)
        wall = merged_by(load(run.files), "wall-time", lambda s, l: l.get("thread name"))
        for i in range(3):
            self.assertGreater(wall.get("eq-run-%d" % i, 0), 1000 * MS, dict(wall))

    def test_threads_starting_threads(self):
        # A thread starts thousands of threads, one at a time: the main thread, then a
        # thread of its own. A new thread's state is in the interpreter's list before
        # the thread runs (on 3.11 with the ident and native id of the thread starting
        # it): the sampler must not take it for the thread starting it, which would
        # then lose the wall time of that tick (the main thread lost 2-3% of it, on
        # 3.11 here). The starting thread's wall time covers its loop, less at most the
        # interval between ticks that spans the loop's end (the program reports the
        # statistics once it is over), and is no more than the profile's duration.
        for args, name in ((["starts.py", "2"], "MainThread"),
                           (["starts.py", "2", "thread"], "starter")):
            run = self.cli(args)
            (me,) = run.json()
            self.check_summary(run)
            profiles = load(run.files)
            wall = merged_by(profiles, "wall-time", lambda s, l: l.get("thread name"))
            st = me["sampler"]
            gap = longest_gap(st, me["now_ns"])
            report = (name, wall[name] / MS, me["loop_ns"] / MS, me["started"], gap / MS)
            self.assertGreater(me["started"], 1000, report)
            self.assertGreaterEqual(wall[name], me["loop_ns"] - gap, report)
            self.assertLessEqual(wall[name], sum(p.duration_nanos for p in profiles), report)
            print("\n  starts (thread, its wall, loop, threads started, longest tick gap; "
                  "ms): %r" % (report,), file=sys.stderr)

    def test_async_exceptions(self):
        # PyThreadState_SetAsyncExc finds the thread state by thread ident: the
        # sampler's own thread state must not carry the ident of the thread that started
        # the profiler, or every exception meant for that thread goes to it, and a
        # program that stops a loop that way never stops.
        run = self.cli(["asyncexc.py", "5"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertEqual(me["got"], {"main": 5, "worker": 5}, me)

    def test_names_not_utf8(self):
        # A thread name, a function's qualified name and file name, and a tag's key and
        # value with lone surrogates (a file name that is not UTF-8 decodes to them):
        # each repaired (U+FFFD for each byte of the surrogate's encoding), none empty
        # or left out, and counted among the repairs. The tag holds only while the
        # function runs: a tick as the thread starts or ends sees the thread untagged.
        # The function has most of the CPU time the thread measured around it (its
        # 0.5 s of wall time is less CPU time on a loaded host).
        run = self.cli(["oddnames.py", "0.5"])
        (me,) = run.json()
        self.check_summary(run)
        profiles = load(run.files)
        bad = "\ufffd" * 3
        odd = ("odd%sname" % bad, "/nonexistent/%s.py" % bad)
        cpu = collections.Counter()
        for p, stack, labels, values in samples_of(profiles):
            if labels.get("thread name") == "worker-" + bad:
                if stack[0][:2] == odd:
                    self.assertEqual(labels.get("k" + bad), "v" + bad, labels)
                cpu[stack[0][:2]] += values[p.index("cpu-time")]
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        self.assertGreater(cpu[odd], me["odd_cpu_ns"] - 2 * interval,
                           (dict(cpu), me["odd_cpu_ns"]))
        self.assertTrue(any("invalid UTF-8 repaired" in c for p in profiles
                            for c in p.comments), [p.comments for p in profiles])

    def test_stack_shapes(self):
        # The sampler reads interpreter frames itself; a thread blocked in a generator,
        # in a function C code called back, in a coroutine driven by send(), 30
        # recursions deep, or in a class body has, in the profile, exactly the stack
        # that frame objects show (qualified names, files, lines, leaf first): no C
        # entry frame, no frame of a function still in its prologue, nothing missing.
        # The stacks do not change while the threads wait (the program reads them before
        # and after), so every sample of a thread with that leaf frame (name, file, line)
        # must be that stack, and those must hold the wait's wall time (at least the
        # waited time less an INTERVAL). (A sample may catch Condition.wait at another
        # line, before it blocks: CPython can switch threads after its first C calls.)
        run = self.cli(["shapes.py", "0.5"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertEqual(me["before"], me["after"])
        blocked = {name: [tuple(f) for f in st] for name, st in me["before"].items()}
        wall = collections.Counter()
        for p, stack, labels, values in samples_of(load(run.files)):
            name = labels.get("thread name")
            if name in blocked and stack and stack[0] == blocked[name][0]:
                self.assertEqual(stack, blocked[name], name)
                wall[name] += values[p.index("wall-time")]
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        for name in blocked:
            self.assertGreater(wall[name], 500 * MS - interval, (name, dict(wall)))

    def test_pool_bursts(self):
        # Four threads that compute in ~1 ms bursts and wait ~3 ms in between, as a
        # server's pool does: a pass takes the GIL when one lets it go, where it waits,
        # so charging each sample the CPU time since the thread's previous one would
        # give the wait nearly all of it (3.11: all; 3.12: three quarters). The time a
        # thread uses between ticks goes to its stack of its last sample that found it
        # running (cpu_moved counts those samples). Measured by the threads: the bursts
        # are ~95% of their CPU time; the profile gives them 88-99% of it here, 65-84%
        # in the ASan build (whose sampler is slower; 50-75% with a CPU kept busy
        # beside it), against 0% (3.11) and 24% (3.12) when the wait got the time. So
        # at least two fifths of the bursts' measured time in burst() over the four
        # threads, and each thread's total within an interval of its clock (they block
        # at the end, sampled by the last pass).
        run = self.cli(["--cpu-budget", "0", "pool.py", "2"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertGreater(me["sampler"]["cpu_moved"], 0, me["sampler"])
        profiles = load(run.files)
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        cpu = merged_by(profiles, "cpu-time", lambda s, l: (l.get("thread name"), leaf(s)))
        threads = me["threads"]
        in_burst = sum(v for (n, f), v in cpu.items() if n in threads and f == "burst")
        measured = sum(t["burst_cpu_ns"] for t in threads.values())
        report = ({"%s %s" % k: round(v / MS, 1) for k, v in cpu.items()},
                  {n: (round(t["burst_cpu_ns"] / MS, 1), round(t["cpu_ns"] / MS, 1))
                   for n, t in threads.items()})
        self.assertGreaterEqual(in_burst, 2 * measured / 5, report)
        for name, t in threads.items():
            total = sum(v for (n, _), v in cpu.items() if n == name)
            self.assertGreaterEqual(total, t["cpu_ns"] - interval, (name, report))
            self.assertLessEqual(total, t["cpu_ns"] + interval, (name, report))

    def test_cpu_in_c_without_the_gil(self):
        # A thread that waits (its stack is copied and its clock not read at every tick
        # while nothing runs Python code), then computes in C with the GIL released while
        # no thread takes the GIL, then waits again: its C work's CPU time goes to
        # crunch(), whose frame is on its stack all along, and its total CPU time to the
        # thread (a sampler that kept taking it for idle would give crunch none).
        # crunch() gets at least its measured CPU time less two intervals' worth (the
        # tick that finds it and the last one before it returns) and at most that plus
        # the CPU the thread spent around it; the thread's total, what test_threads
        # allows.
        run = self.cli(["cwork.py", "0.4", "2000000", "0.3"])
        (me,) = run.json()
        self.check_summary(run)
        profiles = load(run.files)
        cpu = merged_by(profiles, "cpu-time",
                        lambda s, l: (l.get("thread name"), any(f[0] == "crunch" for f in s)))
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        report = ({k: round(v / MS, 1) for k, v in cpu.items()},
                  round(me["crunch_cpu_ns"] / MS, 1), round(me["cpu_total_ns"] / MS, 1))
        in_crunch = cpu[("c-worker", True)]
        total = in_crunch + cpu[("c-worker", False)]
        self.assertGreaterEqual(in_crunch, me["crunch_cpu_ns"] - 2 * interval, report)
        self.assertLessEqual(in_crunch, me["cpu_total_ns"] + 5 * MS, report)
        self.assertLessEqual(total, me["cpu_total_ns"] + 5 * MS, report)
        self.assertGreaterEqual(total, me["cpu_total_ns"] - interval, report)

    def test_idle_stack_reused(self):
        # A thread that has not run since its previous sample keeps its stack, copied
        # instead of walked (stacks_reused); once it runs, its new stack is sampled.
        # Each phase's wall time is what the thread measured of it, give or take an
        # INTERVAL at each of its two ends (a sample charges the interval before it to
        # the stack it finds), and the GIL waits of the thread's wake-ups.
        run = self.cli(["blocking.py", "0.6", "0.4", "0.6"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertGreater(me["sampler"]["stacks_reused"], 20, me["sampler"])
        profiles = load(run.files)

        def phase(stack, labels):
            if labels.get("thread name") != "phased":
                return None
            names = [f[0] for f in stack]
            return next((n for n in me["phases"] if n in names), None)

        wall = merged_by(profiles, "wall-time", phase)
        gil_wait = me["sampler"]["gil_wait_ns_max"]
        tol = 2 * longest_interval(me["rate"], me["sampler"], me["now_ns"]) + gil_wait
        for name, measured in me["phases"].items():
            self.assert_near(wall[name], measured, tol, "%s: wall %r, measured %r" % (
                name, dict(wall), me["phases"]))

    def test_idle_thread_renamed(self):
        # A thread that runs no code keeps its stack and its name from sample to sample,
        # but its name is read again every 16 passes: a name another thread gives it
        # shows within 16 passes. So "before" and "after" each have the wall time the
        # main thread measured of them, give or take those 16 passes (each at most an
        # INTERVAL after the one before), and an INTERVAL at each end.
        run = self.cli(["renamed.py", "0.6", "1.5"])
        (me,) = run.json()
        self.assertGreater(me["sampler"]["stacks_reused"], 20, me["sampler"])
        self.check_renamed(run, me)

    def test_running_thread_renamed(self):
        # A thread that runs Python code all along keeps its name from sample to sample
        # too, read again every 16 passes: the same bounds.
        run = self.cli(["renamed.py", "0.6", "1.5", "busy"])
        (me,) = run.json()
        self.check_renamed(run, me)

    def check_renamed(self, run, me):
        self.check_summary(run)
        wall = merged_by(load(run.files), "wall-time", lambda s, l: l.get("thread name"))
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        tol = 16 * interval + 2 * interval
        for name in ("before", "after"):
            self.assert_near(wall[name], me[name], tol, "%s: wall %r, measured %r" % (
                name, dict(wall), {n: me[n] for n in ("before", "after")}))

    def test_idle_stacks_of_dying_code(self):
        # Stacks copied from tick to tick while their code objects die as soon as the
        # threads wake, and frame cache entries are evicted all the time (a stress test,
        # run under ASan too; threads wake between the sampler's phase 0 and its taking
        # the GIL by chance): the run ends cleanly, every sample is in the files, and the
        # made functions are there.
        run = self.cli(["--rate", "1000", "--cpu-budget", "0", "churn.py", "4", "2"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertGreater(me["calls"], 100, me)
        self.assertGreater(me["sampler"]["stacks_reused"], 20, me["sampler"])
        self.assert_made_functions(run, "wall-time")

    def test_shared_stacks_of_dying_code(self):
        # churn.py's chains shared by four threads (programs/churn.py, `shared`): a
        # pass finds the same code objects in several stacks, and the same frame
        # repeated in one (a recursion), while chains are dropped every 2 ms and their
        # addresses reused: each sample still shows whole chains, one chain a stack.
        run = self.cli(["--rate", "1000", "--cpu-budget", "0", "churn.py", "4", "2", "shared"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertGreater(me["calls"], 100, me)
        self.assert_made_functions(run, "wall-time")

    def assert_made_functions(self, run, sample_type):
        """churn.py's functions made on the fly have some of sample_type in the files,
        and each sample shows them as churn.py calls them: leaf first made_N_k, ...,
        made_N_0, each from its own file <made-SEED-N-i>, one SEED and N a stack. A frame
        shown with the name or file of another code (a frame cache entry taken for a
        code whose address was reused, or a pass's copy of an entry evicted since) breaks
        the chain."""
        profiles = load(run.files)
        made = merged_by(profiles, sample_type,
                         lambda st, l: any(f[0].startswith("made_") for f in st))
        self.assertGreater(made[True], 0, dict(made))
        for _, stack, _, _ in samples_of(profiles):
            chain = [f for f in stack if f[0].startswith("made_")]
            if not chain:
                continue
            calls = set()
            for name, file, _ in chain:
                m = re.match(r"<made-(\d+)-(\d+)-(\d+)>$", file)
                self.assertTrue(m, (name, file, stack))
                self.assertEqual(name, "made_%s_%s" % (m.group(2), m.group(3)), stack)
                calls.add(m.group(1, 2))
            self.assertEqual(len(calls), 1, stack)
            depth = [int(f[0].rsplit("_", 1)[1]) for f in chain]
            self.assertEqual(depth, list(range(len(depth) - 1, -1, -1)), stack)

    def test_main_thread_alone(self):
        # A main thread running Python code alone samples itself, and the sampler does
        # not take the GIL (ticks_without_gil); new code objects all the time evict
        # frame cache entries, whose references must not pile up: the references held
        # stay a tick's worth (hundreds, against ~5,000 evictions in the run).
        run = self.cli(["churn.py", "0", "2", "spin"])
        (me,) = run.json()
        self.check_summary(run)
        s = me["sampler"]
        self.assertGreater(me["calls"], 100, me)
        self.assertGreater(s["ticks_without_gil"], s["ticks"] // 2, s)
        self.assertLess(s["refs_held"], 500, s)
        self.assert_made_functions(run, "cpu-time")

    def test_references_released_while_finalizers_run(self):
        # The references the sampler releases may be the last ones of objects whose
        # finalizer runs Python code that lets the GIL go (here, to the sampler's next
        # tick): the release must not share its vector with that tick (a use after free
        # under ASan otherwise, found by review). Checked for a clean run and every sample
        # in the files.
        run = self.cli(["--rate", "500", "--cpu-budget", "0", "finalizers.py", "2"])
        (me,) = run.json()
        self.check_summary(run)
        self.assertGreater(me["steps"], 50, me)

    def test_last_pass_at_stop(self):
        # At stop a last pass gives every thread its time since its last sample: at a
        # tick a second, a thread blocked through a 1.6 s profile shows ~1.6 s of wall
        # time where the ticks alone end at 1-1.6 s. The thread that stops the profiler
        # (here the main thread, blocked in a sleep at its last sample) gets its time on
        # its last sample's stack: its own stack then is the stop's.
        out = self.tmpdir()
        release = threading.Event()
        waiter = threading.Thread(target=release.wait, name="waiter")
        waiter.start()
        try:
            p = pprofkit.Profiler(rate=1, out_dir=out, cpu_budget=0)
            t0 = time.monotonic_ns()
            p.start()
            time.sleep(1.6)
            summary = p.stop()
            t1 = time.monotonic_ns()
        finally:
            release.set()
            waiter.join()
        profiles = load(summary["files"])
        wall = merged_by(profiles, "wall-time", lambda s, l: l.get("thread name"))
        report = "wall %r, profiled for %.1f ms" % (dict(wall), (t1 - t0) / MS)
        for name in ("waiter", "MainThread"):
            self.assertGreaterEqual(wall[name], t1 - t0 - 100 * MS, report)
            self.assertLessEqual(wall[name], t1 - t0, report)
        for _, stack, labels, _ in samples_of(profiles):
            if labels.get("thread name") == "MainThread":
                self.assertNotIn("Profiler.stop", [f[0] for f in stack], stack)

    def test_stopping_thread_computing(self):
        # The thread that stops the profiler computed since its last tick: its CPU time
        # goes to its last sample's stack. The main thread samples itself (its
        # callback), another thread is sampled by the passes. At 2 ticks a second (a
        # tick 0.25-0.75 s after the one before), the time after the last tick of a
        # 0.8 s spin is ~0.3 s on average, where the profile of each spin must lack less
        # than 60 ms of its CPU time (the CPU time of start() and stop() may add as much).
        def profile_spin():
            p = pprofkit.Profiler(rate=2, out_dir=self.tmpdir(), cpu_budget=0)
            p.start()
            spun = spin_for(0.8)
            return spun, p.stop()

        got = {}
        got["MainThread"] = profile_spin()
        worker = threading.Thread(target=lambda: got.setdefault("worker", profile_spin()),
                                  name="worker")
        worker.start()
        worker.join()
        for name, (spun, summary) in got.items():
            cpu = merged_by(load(summary["files"]), "cpu-time",
                            lambda s, l: (l.get("thread name"), leaf(s)))
            report = (name, spun / MS, {k: v / MS for k, v in cpu.items()})
            self.assertLess(abs(cpu.get((name, "spin_for"), 0) - spun), 60 * MS, report)


class TestAsyncio(ProfilerTest):
    """Issue 11: an asyncio program's profile has the names of the tasks that ran, with
    CPU time by task in proportion to each task's work."""

    def test_task_names_and_cpu(self):
        run = self.cli(["tasks.py"])
        (me,) = run.json()
        profiles = load(run.files)
        measured = me["cpu_ns"]
        self.assertEqual(sorted(measured), ["crunch-12", "crunch-4", "crunch-8"])
        cpu = merged_by(profiles, "cpu-time", lambda s, l: l.get("task name"))
        # The crunch tasks ran one after the other: CPU time sampled in one interval
        # goes to the task running at the sample, so each task can gain the previous
        # one's CPU of the interval around its start, and lose its own of the interval
        # around its end: |profile - measured| <= 2 INTERVAL (the loop's own work
        # between steps, a few microseconds each, goes to the tasks too). With 50 ms
        # steps, this keeps 4 : 8 : 12 apart.
        interval = longest_interval(me["rate"], me["sampler"], me["now_ns"])
        report = {n: (round(cpu[n] / MS, 1), round(v / MS, 1)) for n, v in measured.items()}
        for name, v in measured.items():
            self.assert_near(cpu[name], v, 2 * interval, "%s CPU time (%r)" % (name, report))
        self.assertLess(cpu["crunch-4"], cpu["crunch-8"], report)
        self.assertLess(cpu["crunch-8"], cpu["crunch-12"], report)
        # Each crunch task's samples: its name, one task id, the loop's thread, and its
        # step as the leaf with the most CPU time (a sample can also find the task
        # between steps, in the loop's code that its step calls: call_soon...).
        ids = collections.defaultdict(set)
        for p, stack, labels, values in samples_of(profiles):
            name = labels.get("task name")
            if name is None:
                self.assertNotIn("task id", labels)
                continue
            ids[name].add(labels.get("task id"))
            self.assertEqual(labels.get("thread name"), "MainThread", labels)
        by_leaf = merged_by(profiles, "cpu-time", lambda s, l: (l.get("task name"), leaf(s)))
        for name in measured:
            # A task that ran for less than the longest interval between two ticks may
            # have had no tick at all (a loaded host stretches them: the CPU budget).
            if not ids[name] and measured[name] < interval:
                continue
            self.assertEqual(len(ids[name]), 1, (name, ids[name], report))
            self.assertNotIn(None, ids[name])
            mine = {f: v for (t, f), v in by_leaf.items() if t == name}
            self.assertEqual(max(mine, key=mine.get), "crunch_step", (name, mine))
        self.assertEqual(len(set.union(*(ids[n] for n in measured))),
                         sum(1 for n in measured if ids[n]))
        # Only tasks of this program ran (the nap tasks sleep: they may or may not be
        # caught running their few bytecodes). The default-named ones are asyncio.run's:
        # main() is Task-1, and its shutdown runs tasks of its own (async generators,
        # the default executor).
        named = {n for n in ids if not re.match(r"^Task-\d+$", n)}
        self.assertLessEqual(named, set(measured) | {"nap-0", "nap-1", "nap-2"})
        if support.go_available():
            flat, text = support.go_top(run.files[-1], "cpu-time")
            self.assertEqual(max(flat, key=flat.get), "crunch_step", text)
        print("\n  tasks (profile, measured CPU ms): %r, INTERVAL %.1f ms" % (
            report, interval / MS), file=sys.stderr)


class TestTags(ProfilerTest):
    """pprofkit.tag(): its labels on the thread's samples inside the block only, and on
    an asyncio task's samples."""

    def test_thread_and_task_tags(self):
        run = self.cli(["tags.py"])
        self.check_summary(run)  # no label refused
        profiles = load(run.files)
        seen = collections.Counter()
        for p, stack, labels, values in samples_of(profiles):
            fns = [f[0] for f in stack]
            for where in ("inside_fn", "outside_fn", "tagged_step", "plain_step"):
                if where in fns:
                    seen[where] += 1
            # The thread's tag: on every sample inside the block, on none outside it
            # (the block holds nothing but the call of inside_fn).
            if "inside_fn" in fns:
                self.assertEqual(labels.get("thread name"), "tagger", labels)
                self.assertEqual(labels.get("phase"), "inside", labels)
                self.assertEqual(labels.get("n"), 7, labels)  # a number label
            elif "phase" in labels or "n" in labels:
                # Only while entering or leaving the block (tag()'s own frames).
                self.assertEqual(labels.get("thread name"), "tagger", labels)
                self.assertIn("tagger", fns, (fns, labels))
                self.assertNotIn("outside_fn", fns, (fns, labels))
            # The task's tag: on its samples in the block (its steps, its awaits, the
            # loop's code its step calls: call_soon...), never on the other task's, nor
            # on samples outside a task; its req hides the loop thread's (an inner
            # block's value wins), whose other label stays.
            if "tagged_step" in fns:
                self.assertEqual(labels.get("task name"), "tagged-task", labels)
                self.assertEqual(labels.get("req"), "r-1", labels)
                self.assertEqual(labels.get("loop"), "main", labels)
            if labels.get("req") == "r-1":
                self.assertEqual(labels.get("task name"), "tagged-task", labels)
            if "plain_step" in fns:
                self.assertEqual(labels.get("task name"), "plain-task", labels)
                self.assertEqual((labels.get("req"), labels.get("loop")), ("outer", "main"),
                                 labels)
            if labels.get("task name") == "plain-task":
                self.assertNotEqual(labels.get("req"), "r-1", labels)
        for where in ("inside_fn", "outside_fn", "tagged_step", "plain_step"):
            self.assertGreater(seen[where], 0, (where, seen))


class TestFork(ProfilerTest):
    """Issue 11: after os.fork() and multiprocessing's fork, the child profiles itself
    into files with its own pid; the parent loses nothing."""

    def assert_child_life(self, wall, me, stopped):
        """A forked child's main thread's wall time, from its sampler's start (in the fork
        handler) to its last sample: at least to an INTERVAL before the end of its work
        (me: its line, with now_ns and the sampler's statistics), at most to its
        profiler's stop (stopped: its report_at_stop line). INTERVAL from the statistics
        at the stop: the last tick before the stop may have come late (the CPU budget
        spaces ticks out when a tick costs more, as on a loaded machine). Returns both
        lives (ns)."""
        start = me["sampler"]["started_ns"]
        life, life_to_stop = me["now_ns"] - start, stopped["now_ns"] - start
        interval = longest_interval(me["rate"], stopped["at_stop"], stopped["now_ns"])
        self.assertGreaterEqual(wall, life - interval, (wall, life, life_to_stop))
        self.assertLessEqual(wall, life_to_stop, (wall, life, life_to_stop))
        return life, life_to_stop

    def test_fork_and_multiprocessing(self):
        run = self.cli(["forks.py"])
        lines = {d["role"]: d for d in run.json() if "role" in d}
        stopped = {d["pid"]: d for d in run.json() if "at_stop" in d}
        self.assertEqual(sorted(lines), ["fork", "mp", "parent"], run.out)
        parent = lines["parent"]
        self.assertEqual(parent["fork_status"], 0)
        self.assertEqual(parent["mp_exitcode"], 0)
        self.assertEqual(lines["fork"]["pid"], parent["fork_pid"])
        self.assertEqual(lines["mp"]["pid"], parent["mp_pid"])
        pids = {parent["pid"], parent["fork_pid"], parent["mp_pid"]}
        self.assertEqual(len(pids), 3)
        self.assertEqual({int(FILE_RE.match(os.path.basename(f)).group(1))
                          for f in run.files}, pids, run.files)
        self.check_summary(run, pids)  # each child prints its own line at its os._exit

        def fns(profiles):
            out = collections.Counter()
            for p, stack, _, values in samples_of(profiles):
                for f in {f[0] for f in stack}:
                    out[f] += values[p.index("samples")]
            return out

        work = {"parent": "parent_work", "fork": "child_work", "mp": "mp_work"}
        pid_of = {"parent": parent["pid"], "fork": parent["fork_pid"],
                  "mp": parent["mp_pid"]}
        report = {}
        for role, pid in pid_of.items():
            profiles = load(run.pid_files(pid))
            seen = fns(profiles)
            # Each process's own work, and none of the others'.
            self.assertGreater(seen[work[role]], 0, (role, seen))
            for other, fn in work.items():
                if other != role:
                    self.assertEqual(seen[fn], 0, (role, fn, seen))
            # The main thread's wall time covers the process's profiled life: nothing
            # lost across the forks (parent), the child's own life from the fork (the
            # children: their sampler starts again in the fork handler).
            me = lines[role]
            interval = longest_interval(me["rate"], stopped[pid]["at_stop"], stopped[pid]["now_ns"])
            wall = merged_by(profiles, "wall-time",
                             lambda s, l: l.get("thread name"))
            duration = sum(p.duration_nanos for p in profiles)
            report[role] = (round(wall["MainThread"] / MS, 1), round(duration / MS, 1))
            if role == "parent":
                self.assert_near(wall["MainThread"], duration, interval,
                                 "parent MainThread wall vs its profiles' duration")
                continue
            # A child's life, to its profiler's stop at os._exit (after
            # multiprocessing's teardown for the mp child).
            life, life_to_stop = self.assert_child_life(wall["MainThread"], me, stopped[pid])
            report[role] += (round(life / MS, 1), round(life_to_stop / MS, 1))
            # Its window starts at the fork, before the sampler's start.
            self.assertLessEqual(wall["MainThread"], duration, (role, report))
        print("\n  fork (MainThread wall, duration; children: life to the end of the work, "
              "to the profiler's stop; ms): %r" % report, file=sys.stderr)

    def test_fork_with_a_request_pending(self):
        # The parent forks while its main thread holds the GIL in C code, the sampler's
        # request to it (a pending call) unanswered: the child inherits the request and
        # runs it at its first bytecode, in an at-fork handler that runs before the
        # package's (programs/fork_pending.py). No sample may come of it: each child's
        # profile has nothing of that handler, and its main thread's wall time is within
        # its own sampler's life (a sample taken there would count from the parent's).
        out_dir = self.tmpdir()
        run = self.run_python(["fork_pending.py", out_dir, "4"], out_dir=out_dir)
        lines = run.json()
        children = {d["pid"]: d for d in lines if "started_ns" in d}
        self.assertEqual(sorted(children), sorted(lines[-1]["children"]), run.out)
        sampled = 0
        for pid, child in children.items():
            profiles = load(run.pid_files(pid))
            # A child's 50 ms of work may get no tick on a loaded host (the CPU budget
            # spaces them out): then no sample and no file.
            self.assertEqual(bool(profiles), child["samples"] > 0, (pid, child))
            if not profiles:
                continue
            sampled += 1
            frames = {f[0] for _, stack, _, _ in samples_of(profiles) for f in stack}
            self.assertIn("child_work", frames, pid)
            self.assertNotIn("early_child", frames, pid)
            wall = merged_by(profiles, "wall-time", lambda s, l: l.get("thread name"))
            self.assertLessEqual(wall["MainThread"], child["stopped_ns"] - child["started_ns"],
                                 (pid, child))
        self.assertGreater(sampled, 0, children)

    def test_fork_from_another_thread(self):
        # A thread other than the main one forks (programs/fork_thread.py): in the child
        # it is the main thread and the only one, under its own name; its wall time is
        # its sampler's life, as for the other children; the parent's files hold none of
        # the child's work. It samples itself as a main thread does (its callbacks, pending
        # calls): the parent's main thread must not have been handing the GIL over inside
        # a pending call when the thread that took the GIL forked (the child would
        # inherit CPython's mark of pending calls being handled, and never run one).
        # The child's thread may also return or call sys.exit(): CPython then ends that
        # thread alone, running no exit handler, and the process ends with its last
        # thread; a thread of the package's (not sampled) then stops the profiler, whose
        # threads would otherwise keep the child alive for ever.
        for how in ("return", "sys_exit"):
            run = self.cli(["fork_thread.py", how])
            lines = {d["role"]: d for d in run.json() if "role" in d}
            self.assertEqual(sorted(lines), ["child", "parent"], (how, run.out))
            child, parent = lines["child"], lines["parent"]
            self.assertEqual((parent["child_status"], child["pid"]), (0, parent["child_pid"]))
            self.check_summary(run, {parent["pid"], child["pid"]})
            wall = merged_by(load(run.pid_files(child["pid"])), "wall-time",
                             lambda s, l: l.get("thread name"))
            self.assertEqual(set(wall), {"forker"}, (how, wall))
        run = self.cli(["fork_thread.py"])
        out = run.json()
        lines = {d["role"]: d for d in out if "role" in d}
        stopped = {d["pid"]: d for d in out if "at_stop" in d}
        self.assertEqual(sorted(lines), ["child", "parent"], run.out)
        child, parent = lines["child"], lines["parent"]
        self.assertEqual((parent["child_status"], child["pid"]), (0, parent["child_pid"]))
        self.check_summary(run, {parent["pid"], child["pid"]})
        profiles = load(run.pid_files(child["pid"]))
        cpu = merged_by(profiles, "cpu-time", lambda s, l: (l.get("thread name"), leaf(s)))
        wall = merged_by(profiles, "wall-time", lambda s, l: l.get("thread name"))
        self.assertEqual(set(wall), {"forker"}, wall)
        self.assert_child_life(wall["forker"], child, stopped[child["pid"]])
        self.assertEqual(max(cpu, key=cpu.get), ("forker", "spin"), cpu)
        st = stopped[child["pid"]]["at_stop"]
        self.assertGreater(st["main_callbacks"], st["ticks"] // 2, st)
        print("\n  fork from a thread: child wall %.1f ms; %d ticks, %d main callbacks, %d "
              "main blocked" % (wall["forker"] / MS, st["ticks"], st["main_callbacks"],
                                st["main_blocked"]), file=sys.stderr)
        fns = {f[0] for _, stack, _, _ in samples_of(load(run.pid_files(parent["pid"])))
               for f in stack}
        self.assertNotIn("child_work", fns)

    def test_fork_with_a_loop_in_another_thread(self):
        # A thread runs an event loop whose tasks wait when the main thread forks: in
        # the child that thread does not exist and the loop never runs again, so its
        # tasks wait on nothing and get no sample (they got the child's whole life, under
        # a thread id of the parent's). The parent samples them as before.
        run = self.cli(["fork_loop.py"])
        lines = {d["role"]: d for d in run.json()}
        self.assertEqual(sorted(lines), ["child", "parent"], run.out)
        parent, child = lines["parent"], lines["child"]
        self.assertEqual((parent["child_status"], child["pid"]), (0, parent["child_pid"]))
        self.check_summary(run, {parent["pid"], child["pid"]})
        tasks = lambda pid: {l["task name"] for _, _, l, _ in samples_of(load(run.pid_files(pid)))
                             if l.get("task name", "").startswith("parent-task-")}
        self.assertEqual(tasks(child["pid"]), set())
        self.assertEqual(len(tasks(parent["pid"])), 10)

    def test_subprocesses(self):
        # With --subprocesses, a subprocess running Python and a multiprocessing "spawn"
        # process profile themselves: files with their own pids, each with its own work
        # and none of the others', and a summary line each. Without it, only the parent.
        # --cpu-budget 0: a first tick that costs much (under ASan) would otherwise
        # space the next ones out past the 0.3 s of a process's work.
        for flag in (True, False):
            run = self.cli((["--subprocesses"] if flag else []) +
                           ["--cpu-budget", "0", "spawner.py"])
            lines = {d["role"]: d for d in run.json()}
            self.assertEqual(sorted(lines), ["parent", "spawn", "sub"], run.out)
            parent = lines["parent"]
            self.assertEqual((parent["sub_status"], parent["spawn_exitcode"]), (0, 0))
            self.assertEqual(lines["spawn"]["pid"], parent["spawn_pid"])
            pid_of = {role: d["pid"] for role, d in lines.items()}
            self.assertEqual(len(set(pid_of.values())), 3)
            profiled = set(pid_of) if flag else {"parent"}
            for role in pid_of:
                self.assertEqual("rate" in lines[role], role in profiled, (flag, lines[role]))
            pids = {pid_of[r] for r in profiled}
            self.assertEqual({int(FILE_RE.match(os.path.basename(f)).group(1))
                              for f in run.files}, pids, run.files)
            self.check_summary(run, pids)
            work = {"parent": "parent_work", "sub": "sub_work", "spawn": "spawned_work"}
            for role in profiled:
                seen = merged_by(load(run.pid_files(pid_of[role])), "samples",
                                 lambda st, l: frozenset(f[0] for f in st))
                fns = collections.Counter()
                for names, n in seen.items():
                    for fn in names:
                        fns[fn] += n
                self.assertGreater(fns[work[role]], 0, (role, fns))
                for other, fn in work.items():
                    if other != role:
                        self.assertEqual(fns[fn], 0, (role, fn, fns))


class TestSigterm(ProfilerTest):
    """SIGTERM, unless the program handles it, writes the last window before the process
    dies of it; a program's own handler is left alone."""

    def functions_of(self, files):
        fns = collections.Counter()
        for _, stack, _, values in samples_of(load(files)):
            for name in {f[0] for f in stack}:
                fns[name] += 1
        return fns

    def test_killed(self):
        # The main thread computing, or asleep in a C call (a Python handler would wait
        # for it to return): the process dies of the signal within seconds, its files
        # holding what it did (the export period is a minute: without the handler there
        # would be none).
        for mode, fn in (("spin", "spin_until_killed"), ("sleep", "main")):
            with self.subTest(mode=mode):
                t0 = time.monotonic()
                run = self.cli(["--export-period", "60", "sigterms.py", mode],
                               expect_rc=-signal.SIGTERM)
                self.assertLess(time.monotonic() - t0, 30)
                self.assertEqual(run.summary_lines(), [], run.err)  # no exit handler ran
                self.assertTrue(run.files, run.err)
                fns = self.functions_of(run.files)
                self.assertGreater(fns[fn], 0, fns)

    def test_standard_streams_closed(self):
        # Started with fds 0 and 1 closed (as some supervisors start programs), the
        # program's write to fd 1 fails as it would without the profiler (the process
        # killed itself when the SIGTERM pipe took those fds and the byte was a 'T'), and
        # a SIGTERM later writes the last window.
        out = self.tmpdir()
        closed = ("import os, sys; os.close(0); os.close(1); "
                  "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")
        run = self.run_python(["-c", closed, "-m", "pprofkit", "run", "--out", out,
                               "--export-period", "60", "sigterms.py", "closed"],
                              out_dir=out, expect_rc=-signal.SIGTERM)
        self.assertIn("refused: errno %d" % errno.EBADF, run.err)
        self.assertGreater(self.functions_of(run.files)["work"], 0, run.err)

    def test_program_handler(self):
        # A handler the program installs wins: it runs, the program exits with its status
        # and writes its last window at exit as any exit does.
        run = self.cli(["--export-period", "60", "sigterms.py", "handler"], expect_rc=3)
        self.assertEqual(run.out.split(), ["handled"])
        self.check_summary(run)
        self.assertGreater(self.functions_of(run.files)["work"], 0)

    def test_during_stop(self):
        # A SIGTERM while the profiler's stop waits for its uploads (a server that never
        # answers): the stop writes the window, then the process dies of the signal
        # instead of living on.
        out = self.tmpdir()
        run = self.run_python([os.path.join(PROGRAMS, "sigterms.py"), "during_stop", out],
                              out_dir=out, expect_rc=-signal.SIGTERM)
        self.assertNotIn("survived", run.out)
        self.assertTrue(run.files, run.err)
        self.assertGreater(self.functions_of(run.files)["work"], 0)

    def test_ctrl_c_during_stop(self):
        # A Ctrl-C while the stop waits for its uploads: the stop ends first (the last
        # window, the summary), then raises KeyboardInterrupt (the summary was lost).
        out = self.tmpdir()
        run = self.run_python([os.path.join(PROGRAMS, "sigterms.py"), "sigint_during_stop",
                               out], out_dir=out)
        (me,) = run.json()
        self.assertEqual((me["interrupted"], me["summary"]), (True, True), me)
        self.assertEqual(sorted(me["files"]), sorted(run.files), me)
        self.assertGreater(self.functions_of(run.files)["work"], 0)

    def test_ctrl_c_during_the_exit(self):
        # A Ctrl-C while the exit's stop waits for the uploads: every profiler still
        # stops (their files), and os._exit exits with its status (it raised
        # KeyboardInterrupt, and a forked child could have run on in its parent's code).
        for how, rc in (("return", 0), ("os_exit", 7)):
            with self.subTest(how=how):
                out = self.tmpdir()
                run = self.run_python([os.path.join(PROGRAMS, "sigterms.py"),
                                       "sigint_during_exit", out, how], expect_rc=rc)
                names = {f.split(".")[0] for f in os.listdir(out) if f.endswith(".pb.gz")}
                self.assertEqual(names, {"python", "second"}, run.err)
                self.assertNotIn("Traceback", run.err)

    def test_disposition(self):
        # Armed while the profiler runs, the default back after its stop; a handler the
        # program installed first is left as it is.
        run = self.run_python([os.path.join(PROGRAMS, "sigterms.py"), "disposition"])
        (steps,) = run.json()
        self.assertEqual((steps["before"], steps["stopped"]), (0, 0), steps)
        self.assertNotEqual(steps["started"], 0, steps)
        self.assertTrue(steps["own_kept"] and steps["own_kept_after_stop"], steps)

    def test_pool_terminate(self):
        # Pool.terminate() ends its workers with SIGTERM, some maybe while they leave by
        # themselves (os._exit, the profiler's stop under way): each writes its window.
        run = self.cli(["--export-period", "60", "sigterms.py", "pool"])
        (me,) = run.json()
        self.assertEqual(len(me["workers"]), 2, me)
        for pid in me["workers"]:
            files = run.pid_files(pid)
            self.assertTrue(files, (pid, me, run.files))
            self.assertGreater(self.functions_of(files)["work"], 0, pid)


class TestFinalization(ProfilerTest):
    """Issue 11: the last window is written however the program ends, with the sampler
    running: normally, by an exception, sys.exit, os._exit; under the CLI and with
    pprofkit.start() in a script run with plain python."""

    def check_written(self, run, threads=("MainThread",)):
        self.assertEqual(len(run.files), 1, run.files)  # the last window: it is written
        (p,) = load(run.files)
        by_thread = collections.Counter()
        for stack, labels, values in p.samples:
            if "work_before_exit" in [f[0] for f in stack]:
                by_thread[labels.get("thread name")] += values[p.index("samples")]
        for t in threads:
            self.assertGreater(by_thread[t], 0, (t, by_thread))
        return p

    def test_stop_called_by_a_finalizer_in_a_pass(self):
        # The sampler's pass lets go of code objects it held (in the sampler's thread,
        # or on 3.12 and later in the thread holding the GIL); a weakref callback that
        # runs there and stops the sampler would make that thread wait for itself (a
        # hang): stop() raises RuntimeError there instead, and the program runs on and
        # ends with its profile written.
        # Profiler.stop() there raises too, before it changes anything (it closed the
        # recorder first, and the profiler was left half stopped, with no summary ever):
        # the profiler runs on, and its stop at exit writes the summary.
        for args in (["10"], ["10", "profiler"]):
            run = self.cli(["--rate", "1000", "--cpu-budget", "0", "stop_in_pass.py"] + args)
            (me,) = run.json()
            self.check_summary(run)
            self.assertGreaterEqual(me["refused"], 1, me)
            self.assertGreater(me["sampler"]["ticks"], 0, me)

    def test_cli_ends(self):
        for mode, rc in [("return", 0), ("raise", 1), ("exit3", 3), ("os_exit4", 4),
                         ("daemon", 0), ("exec", 0), ("fexec", 0)]:
            with self.subTest(mode=mode):
                run = self.cli(["exits.py", mode], expect_rc=rc)
                if mode == "exec":  # the profiler wraps os.execv and os.execve too
                    self.assertEqual(run.out.split("\n")[:2], ["refused", "after exec"])
                if mode == "fexec":
                    self.assertEqual(run.out, "after exec\n")
                self.check_written(run, ("MainThread", "spinner") if mode == "daemon"
                                   else ("MainThread",))
                if mode == "raise":
                    self.assertIn("RuntimeError: the program fails", run.err)
                self.check_summary(run)  # os._exit too: the profiler wraps it

    def test_self_started(self):
        for mode, rc in [("return", 0), ("os_exit4", 4), ("daemon", 0), ("raise", 1),
                         ("exec", 0)]:
            with self.subTest(mode=mode):
                out = self.tmpdir()
                run = self.run_python(["exits.py", "--self-start", out, mode], out_dir=out,
                                      expect_rc=rc)
                self.check_written(run, ("MainThread", "spinner") if mode == "daemon"
                                   else ("MainThread",))
                self.assertEqual(run.summary_lines(), [])
                self.assertNotIn("Fatal", run.err)



REPO_TESTS = os.path.join(HERE, "..", "..", "tests")
# Debian's python3 has python3-protobuf, which the OTLP checks decode with.
DEBIAN_PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else "python3"


class Receiver:
    """programs/receiver.py (tests/test_upload_receiver.py, which checks every request
    itself; the totals it saw are printed instead of compared) in MODE with EXPECT; in
    mode "otlp", the receiver itself (its requests are compared with the files by
    tests/check_otlp.py), run by Debian's python3."""

    def __init__(self, test, mode, expect):
        env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONMALLOC")}
        cmd = ([DEBIAN_PYTHON, os.path.join(REPO_TESTS, "test_upload_receiver.py")]
               if mode == "otlp" else [sys.executable, os.path.join(PROGRAMS, "receiver.py")])
        self.proc = subprocess.Popen(
            cmd + [mode, json.dumps(dict(expect, limit=GUARD))], stdout=subprocess.PIPE, env=env)
        test.addCleanup(self.kill)
        self.lines = queue.Queue()
        threading.Thread(target=self.read, daemon=True).start()
        try:
            first = self.lines.get(timeout=GUARD)
        except queue.Empty:
            test.fail("the receiver did not start")
        test.assertTrue(first and first.startswith("PORT "), first)
        self.url = "http://127.0.0.1:%d" % int(first.split()[1])

    def read(self):
        for line in self.proc.stdout:
            self.lines.put(line.decode().strip())
        self.lines.put(None)

    def finish(self):
        """Waits for the receiver's exit: (status, [totals of each profile received])."""
        try:
            rc = self.proc.wait(GUARD + 10)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("the receiver did not exit")
        totals = []
        while True:
            line = self.lines.get(timeout=GUARD)
            if line is None:
                return rc, totals
            if line.startswith("TOTALS "):
                totals.append(json.loads(line[7:]))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


TYPES_JSON = [list(pprofkit.WALL_TIME), list(pprofkit.CPU_TIME), list(pprofkit.SAMPLES)]
# As the Pyroscope sink sends them: Grafana Pyroscope refuses a '-' in a sample type.
PY_TYPES_JSON = [[t.replace("-", "_"), u] for t, u in TYPES_JSON]


def dd_expect(tags):
    return {"path": "/profiling/v1/input", "origin": "pprofkit",
            "origin_version": pprofkit.VERSION, "family": "python", "endpoint_counts": None,
            "sample_types": TYPES_JSON, "count": 1,
            "tags": dict(tags, language="python", profiler_version=pprofkit.VERSION)}


def py_expect(name):
    return {"name": name, "sample_rate": "100", "spy_name": "pprofkit-python",
            "sample_types": PY_TYPES_JSON, "count": 1}


class TestUploads(ProfilerTest):
    """Issue 11: uploads to the Datadog and Pyroscope test servers, configured by options
    or by the environment. The receivers check each request; both get the same window as
    the file, so their totals equal the file's."""

    def check(self, run, receivers):
        (p,) = load(run.files)  # one window (export period 60 s): one upload each
        totals = [p.total(t) for t, _ in p.sample_types]
        for rx in receivers:
            rc, got = rx.finish()
            self.assertEqual(rc, 0, "the receiver found a bad or missing request")
            self.assertEqual(got, [totals])
        lines = run.summary_lines()
        self.assertEqual(len(lines), 1, run.err)
        self.assertIn("datadog: 1 sent, 0 dropped", lines[0])
        self.assertIn("pyroscope: 1 sent, 0 dropped", lines[0])

    def test_options(self):
        dd = Receiver(self, "datadog", dd_expect(
            {"service": "svc", "env": "prod", "version": "1.2", "team": "core", "k2": "v2"}))
        py = Receiver(self, "pyroscope", py_expect("svc{team=core,k2=v2}"))
        run = self.cli(["--datadog", dd.url, "--pyroscope", py.url, "--service", "svc",
                        "--env", "prod", "--version", "1.2", "--tags", "team:core,k2:v2",
                        "work.py"])
        self.check(run, [dd, py])

    def test_environment(self):
        dd = Receiver(self, "datadog", dd_expect(
            {"service": "env-svc", "env": "staging", "version": "3.1", "team": "env",
             "zone": "a"}))
        py = Receiver(self, "pyroscope", py_expect("env-svc{team=env,zone=a}"))
        run = self.cli(["work.py"], env={
            "DD_PROFILING_ENABLED": "true", "DD_TRACE_AGENT_URL": dd.url,
            "DD_SERVICE": "env-svc", "DD_ENV": "staging", "DD_VERSION": "3.1",
            "DD_TAGS": "team:env zone:a", "PPROFKIT_PYROSCOPE": py.url})
        self.check(run, [dd, py])



class TestOtlp(ProfilerTest):
    """Issue 17: --otlp URL sends each export to an OpenTelemetry collector; the receiver
    checks the HTTP details and the request's structure and resource, and check_otlp.py
    compares the request with the file of the same window."""

    def test_otlp(self):
        save = tempfile.mkdtemp(prefix="ppk-otlp.")
        self.addCleanup(shutil.rmtree, save, True)
        rx = Receiver(self, "otlp", {
            "gzip": False, "service_name": "svc", "service_version": "1.2",
            "environment": "prod", "sdk_language": "python",
            "host_name": socket.gethostname(), "attributes": {"team": "core", "k2": "a=b/c"},
            "save_dir": save, "count": 1})
        run = self.cli(["--otlp", rx.url, "--service", "svc", "--env", "prod",
                        "--version", "1.2", "--tags", "team:core k2:a=b/c", "work.py"])
        rc, _ = rx.finish()
        self.assertEqual(rc, 0, "the receiver found a bad or missing request")
        lines = run.summary_lines()
        self.assertEqual(len(lines), 1, run.err)
        self.assertIn("otlp: 1 sent, 0 dropped", lines[0])
        reqs = [os.path.join(save, n) for n in os.listdir(save)]
        self.assertEqual(len(reqs), 1)
        self.assertEqual(len(run.files), 1)
        check = subprocess.run(
            [DEBIAN_PYTHON, os.path.join(REPO_TESTS, "check_otlp.py"), "--pprof",
             run.files[0], "--"] + reqs, capture_output=True, text=True, timeout=GUARD)
        self.assertEqual(check.returncode, 0, check.stderr)

    def test_otlp_from_environment(self):
        save = tempfile.mkdtemp(prefix="ppk-otlp.")
        self.addCleanup(shutil.rmtree, save, True)
        rx = Receiver(self, "otlp", {
            "gzip": True, "path": "/p", "headers": {"api-key": "k 1"},
            "service_name": "env-svc", "attributes": {"zone": "a"}, "save_dir": save,
            "count": 1})
        run = self.cli(["work.py"], env={
            "PPROFKIT_OTLP": "1", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT": rx.url + "/p",
            "OTEL_EXPORTER_OTLP_HEADERS": "api-key=k%201",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            "OTEL_RESOURCE_ATTRIBUTES": "service.name=env-svc,zone=a"})
        rc, _ = rx.finish()
        self.assertEqual(rc, 0, "the receiver found a bad or missing request")
        self.assertIn("otlp: 1 sent, 0 dropped", run.summary_lines()[0])


class TestFunctionIds(ProfilerTest):
    """Issue 13: the sampler pushes frames by function id (the recorder's dictionary),
    learning each function's id once per frame cache entry; an id evicted meanwhile is
    interned again, and the names in the profile are right throughout."""

    def test_evicted_and_interned_again(self):
        # phase_a runs, then phase_b for 1 s (10 exports at 0.1 s: phase_a's functions,
        # unused for the dictionary's 4 exports, are evicted), then phase_a again: its
        # cached ids are stale and the sampler interns them again.
        run = self.cli(["--export-period", "0.1", "--rate", "200", "--cpu-budget", "0",
                        "phases.py", "0.3", "1.0", "0.4"])
        info = run.json()[-1]
        rec, smp = info["recorder"], info["sampler"]
        self.assertGreater(rec["functions_evicted"], 0, rec)
        self.assertGreater(rec["functions"], 0, rec)
        self.assertEqual(rec["functions_refused"], 0, rec)
        self.assertEqual(smp["samples_failed"], 0, smp)
        # A stale id pushed in a batch is refused at the flush; the sampler then pushes
        # that sample's frames one at a time, which interns the function again, and the
        # frame cache learns the new id at the next pass: about one refused flush per
        # evicted function that comes back (+2 for the tick in flight), not one per
        # sample of phase_a after its return (~80 at 200 Hz in 0.4 s).
        self.assertLessEqual(rec["samples_dropped_stale"], rec["functions_evicted"] + 2, rec)
        self.check_summary(run)
        profiles = load(run.files)
        phases = []  # per file: the phases its spin() samples ran in
        for p in profiles:
            seen = set()
            for stack, _, _ in p.samples:
                names = [f[0] for f in stack]
                if "spin" not in names:
                    continue
                i = names.index("spin")
                self.assertEqual(os.path.basename(stack[i][1]), "progutil.py")
                self.assertIn(names[i + 1], ("phase_a", "phase_b"), names)
                self.assertEqual(names[i + 2], "main", names)
                seen.add(names[i + 1])
            phases.append(seen)
        first_b = next(i for i, s in enumerate(phases) if "phase_b" in s)
        last_b = max(i for i, s in enumerate(phases) if "phase_b" in s)
        self.assertTrue(any("phase_a" in s for s in phases[:first_b + 1]), phases)
        self.assertGreaterEqual(last_b - first_b, 5, phases)  # the eviction's time
        self.assertTrue(any("phase_a" in s for s in phases[last_b:]), phases)

    def test_by_strings(self):
        # function_ids=False: the same profile content, and the dictionary unused.
        for ids in (True, False):
            with self.subTest(function_ids=ids):
                out = self.tmpdir()
                p = pprofkit.Profiler(rate=500, out_dir=out, function_ids=ids, cpu_budget=0)
                p.start()
                end = time.monotonic() + 0.3
                while time.monotonic() < end:
                    sum(range(100))
                summary = p.stop()
                self.assertEqual(summary["stats"]["functions"] > 0, ids, summary["stats"])
                (prof,) = load(summary["files"])
                me = [stack for stack, labels, _ in prof.samples
                      if labels.get("thread name") == "MainThread"]
                self.assertTrue(me)
                for stack in me:
                    self.assertIn(("TestFunctionIds.test_by_strings", __file__),
                                  [f[:2] for f in stack])


class TestCLI(ProfilerTest):
    """`python -m pprofkit run`: the -m form, arguments passed through, the options and
    their PPROFKIT_* variables."""

    def test_script_and_module_forms(self):
        args = ["--seconds", "0.2", "a", "b c", "--quiet", "-m", "x"]
        run = self.cli(["work.py"] + args)
        self.assertEqual(run.json()[0], {"argv": ["work.py"] + args, "name": "__main__"})
        self.check_summary(run)  # the script's --quiet is the script's
        run = self.cli(["-m", "work"] + args)
        first = run.json()[0]
        self.assertEqual(first["name"], "__main__")
        self.assertEqual(first["argv"][0], os.path.join(PROGRAMS, "work.py"))  # as python -m
        self.assertEqual(first["argv"][1:], args)
        self.check_summary(run)
        (p,) = load(run.files)
        self.assertGreater(p.by("samples", lambda s, l: leaf(s)).get("deep_leaf", 0), 0)

    def test_relative_out_and_chdir(self):
        # `--out` relative to where the program starts: the profiles go there even
        # though the program changes directory before any export, and the summary
        # counts them (a directory resolved at each export would fail every one).
        home, elsewhere = self.tmpdir(), self.tmpdir()
        out = os.path.join(home, "rel")
        run = self.run_python(["-m", "pprofkit", "run", "--out", "rel",
                               os.path.join(PROGRAMS, "chdir.py"), elsewhere, "0.3"],
                              out_dir=out, cwd=home)
        self.check_summary(run)
        self.assertEqual(len(run.files), 1, run.files)
        self.assertEqual(os.listdir(elsewhere), [])
        (p,) = load(run.files)
        self.assertGreater(p.by("samples", lambda s, l: leaf(s)).get("spin", 0), 0)

    def test_signal_taken_by_a_thread_of_the_program(self):
        # The profiler's threads (the sampler's, the exporter's) block signals, so a
        # signal the program blocks in its threads and waits for with sigwait reaches
        # it (a profiler thread that took it would die of it, and the process too).
        run = self.cli(["--export-period", "0.05", "sigwait.py"])
        self.assertEqual(run.json(), [{"got": signal.SIGUSR1}])
        self.check_summary(run)

    def test_sample_types(self):
        for opt, types in [("--no-cpu", [pprofkit.WALL_TIME, pprofkit.SAMPLES]),
                           ("--no-wall", [pprofkit.CPU_TIME, pprofkit.SAMPLES])]:
            with self.subTest(opt=opt):
                run = self.cli([opt, "work.py"])
                (p,) = load(run.files)
                self.assertEqual(p.sample_types, types)
                self.assertGreater(p.total(types[0][0]), 0)
                self.assertGreater(p.total("samples"), 0)
        run = self.cli(["--no-cpu", "--no-wall", "work.py"], expect_rc=None)
        self.assertNotEqual(run.rc, 0)
        self.assertIn("at least one of wall and cpu", run.err)
        self.assertEqual(run.files, [])

    def test_zstd(self):
        run = self.cli(["--codec", "zstd", "work.py"])
        self.assertEqual(len(run.files), 1)
        self.assertTrue(run.files[0].endswith(".pb.zst"), run.files)
        with open(run.files[0], "rb") as f:
            self.assertEqual(f.read(4), b"\x28\xb5\x2f\xfd")
        (p,) = load(run.files)  # support.raw decompresses with the zstd tool
        self.assertGreater(p.total("samples"), 0)

    def test_summary_and_quiet(self):
        run = self.cli(["work.py"])
        lines = run.summary_lines()
        self.assertEqual(len(lines), 1, run.err)
        self.assertTrue(run.err.rstrip("\n").splitlines()[-1].startswith("pprofkit: pid "),
                        run.err)
        self.assertIn("1 exports, 1 files in %s" % os.path.dirname(run.files[0]), lines[0])
        for quiet in (["--quiet"], ["-q"]):
            run = self.cli(quiet + ["work.py"])
            self.assertEqual(run.err, "")
            self.assertEqual(len(run.files), 1)

    def test_export_period(self):
        run = self.cli(["--export-period", "0.25", "work.py", "--seconds", "1.3"])
        info = run.json()[-1]
        seqs = [int(FILE_RE.match(os.path.basename(f)).group(2)) for f in run.files]
        # About five exports in 1.3 s and the last one at exit; at least three even if
        # the exporter is late.
        self.assertGreaterEqual(len(run.files), 3, run.files)
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))))
        self.check_summary(run)
        profiles = load(run.files)
        # No sample is lost between windows: the main thread's wall time over all files
        # is a sum of intervals between its samples, from the sampler's start (just after
        # the first window's) to its last sample, in the last pass at the stop (the main
        # thread stops the profiler, at exit), after the program's last clock reading
        # (time_ns). The last window stays open a little longer (the profiler's stop),
        # so its end is an upper bound only.
        wall = merged_by(profiles, "wall-time", lambda s, l: l.get("thread name"))
        duration = sum(p.duration_nanos for p in profiles)
        self.assertLessEqual(wall["MainThread"], duration + MS)
        self.assertGreaterEqual(wall["MainThread"],
                                info["time_ns"] - profiles[0].time_nanos - 50 * MS,
                                "MainThread wall over %d files" % len(profiles))
        ends = [p.time_nanos + p.duration_nanos for p in profiles]
        for p, prev_end in zip(profiles[1:], ends):  # a window starts where one ended
            self.assertLessEqual(abs(p.time_nanos - prev_end), MS, (p.time_nanos, prev_end))
        if support.go_available():
            for f in run.files:
                support.go_top(f, "samples")  # go tool pprof reads every file

    def test_deep_stacks_counted(self):
        # A thread's frames past max_frames are counted, not read (CPython's own count
        # on 3.12+, the frames' links on 3.11): each sample keeps its leaf-most 63 frames
        # and "<N frames omitted>" with N the rest of the thread's frames, exactly.
        run = self.cli(["--max-frames", "64", "--rate", "200", "--cpu-budget", "0",
                        "deepstacks.py", "300", "3000", "0.5"])
        self.assertEqual(run.rc, 0, run.err)
        depths = run.json()[-1]
        self.assertEqual(set(depths), {"MainThread", "deep-thread"}, depths)
        seen = collections.Counter()
        for p in load(run.files):
            for stack, labels, _ in p.samples:
                if leaf(stack) != "spin":
                    continue
                name = labels["thread name"]
                seen[name] += 1
                self.assertEqual(len(stack), 64, (name, stack[:3]))
                self.assertEqual([f[0] for f in stack[1:63]], ["deep_bottom"] + ["down"] * 61)
                self.assertEqual(stack[63][0], "<%d frames omitted>" % (depths[name] - 63))
        self.assertGreater(seen["MainThread"], 0, seen)
        self.assertGreater(seen["deep-thread"], 0, seen)
        self.check_summary(run)

    def test_max_frames(self):
        run = self.cli(["--max-frames", "10", "work.py", "--depth", "50"])
        (p,) = load(run.files)
        deep = [stack for stack, _, _ in p.samples if leaf(stack) == "deep_leaf"]
        self.assertTrue(deep)
        for stack in deep:
            self.assertEqual(len(stack), 10, stack)
            self.assertEqual([f[0] for f in stack[:9]], ["deep_leaf"] + ["recurse"] * 8)
            self.assertRegex(stack[9][0], r"^<\d+ frames omitted>$")
        # Without the option the whole recursion is there.
        run = self.cli(["work.py", "--depth", "50"])
        (p,) = load(run.files)
        deep = [stack for stack, _, _ in p.samples if leaf(stack) == "deep_leaf"]
        self.assertTrue(deep)
        for stack in deep:
            self.assertEqual([f[0] for f in stack].count("recurse"), 50, stack)

    def test_environment(self):
        run = self.cli(["work.py", "--depth", "20"], env={
            "PPROFKIT_CODEC": "zstd", "PPROFKIT_NO_WALL": "1", "PPROFKIT_QUIET": "true",
            "PPROFKIT_RATE": "50", "PPROFKIT_MAX_FRAMES": "5",
            "PPROFKIT_EXPORT_PERIOD": "0.1"})
        self.assertEqual(run.err, "")
        self.assertGreaterEqual(len(run.files), 2, run.files)
        self.assertTrue(all(f.endswith(".pb.zst") for f in run.files), run.files)
        profiles = load(run.files)
        for p in profiles:
            self.assertEqual(p.sample_types, [pprofkit.CPU_TIME, pprofkit.SAMPLES])
            self.assertEqual(p.period, 20 * MS)
            for stack, _, _ in p.samples:
                self.assertLessEqual(len(stack), 5)
        self.assertEqual(run.json()[-1]["rate"], 50)
        # PPROFKIT_OUT: the directory.
        out = self.tmpdir()
        run = self.run_python(["-m", "pprofkit", "run", "work.py"], out_dir=out,
                              env={"PPROFKIT_OUT": out})
        self.assertEqual(len(run.files), 1)


class TestBoundedMemory(ProfilerTest):
    """Issue 11 (a smoke version of the benchmark): four event loops create tasks with
    unique names of ~4 KB as fast as they can, for 6 s, profiled at 1000 Hz with an
    export every 0.25 s: RSS stays flat, and no window holds the history."""

    NAME_BYTES = 4000
    SECONDS, WARM_UP = 6.0, 2.0

    @unittest.skipIf(UNDER_ASAN, "ASan keeps freed memory in its quarantine (256 MiB by "
                     "default) and maps shadow memory: RSS does not measure the program")
    def test_many_task_names(self):
        run = self.cli(["--rate", "1000", "--cpu-budget", "0", "--export-period", "0.25",
                        "manytasks.py", str(self.SECONDS), "0.5", "4"])
        reports = run.json()
        self.assertTrue(reports[-1].get("done"), reports[-1])
        profiles = load(run.files)
        names = set()
        for _, _, labels, _ in samples_of(profiles):
            name = labels.get("task name")
            if name is not None and not re.match(r"^Task-\d+$", name):  # serve()
                self.assertTrue(name.startswith("request-"), name)
                names.add(name)
        self.check_summary(run)
        # RSS after warm-up (8 windows exported and reused by then) against the end.
        # The program alone does not grow (its tasks are freed). The library's windows
        # (an active and a spare one) and an export's encoding reuse their memory: they
        # grow only when a window is larger than every one before, by at most the growth
        # of window_bytes_peak (the recorder's own figure) each: 3 times that. 8 MiB
        # more cover allocator noise (glibc's per-thread arenas of five threads, and on
        # 3.12 and later the sampler's passes run by the program's own threads allocate
        # in theirs: from 2 s to 6 s RSS grew by 1.2-1.8 MiB on 3.11, and on 3.12 by
        # -1.2 to 6.0 MiB in runs whose window peak moved by less than 0.3 MiB, against
        # ~100-170 MiB of names sampled: a profiler keeping even a tenth of them would
        # pass the bound).
        early = next(r for r in reports if r["t"] >= self.WARM_UP)
        late = reports[-1]
        peak_early = early["recorder"]["window_bytes_peak"]
        peak = late["recorder"]["window_bytes_peak"]
        bound = 8 * 2**20 + 3 * (peak - peak_early)
        growth = (late["rss_kb"] - early["rss_kb"]) * 1024
        kept = len(names) * self.NAME_BYTES
        print("\n  memory: %d tasks, %d names in the profiles (%.1f MiB), RSS %d KiB at "
              "%.1f s, %d KiB at %.1f s; window peak %d KiB then %d KiB; bound %.1f MiB" % (
                  late["tasks"], len(names), kept / 2**20, early["rss_kb"], early["t"],
                  late["rss_kb"], late["t"], peak_early // 1024, peak // 1024,
                  bound / 2**20), file=sys.stderr)
        self.assertLess(growth, bound, (early, late))
        # No window holds the history: the largest is a fraction of the names' bytes.
        self.assertLess(peak, kept / 3)
        # And the test can tell: a profiler keeping every name sampled (the names went
        # through the windows into the files) would have grown past the bound after the
        # warm-up, by the share of names sampled after it.
        self.assertGreater(kept * (1 - self.WARM_UP / self.SECONDS), bound,
                           "too few names sampled for the test to tell")

    CODE_NAME_BYTES = 100_000

    def test_many_code_objects(self):
        """A program that compiles functions and drops them, one after another, each
        with a name and a file name of 100,000 characters (every other one with a lone
        surrogate): the frame cache holds a reference to each code it saw, and held every
        dead code until another frame took its slot, maybe never (the repaired names of
        the surrogate ones until stop). Its sweep lets them go: 1 s after the program
        dropped the last one, with the profiler still running, none is alive; RSS stays
        flat meanwhile; the names are cut as they were."""
        run = self.cli(["--rate", "1000", "--cpu-budget", "0", "--export-period", "0.25",
                        "manycodes.py", str(self.SECONDS), "0.5", str(self.CODE_NAME_BYTES),
                        "0.005"])
        reports = run.json()
        last = reports[-1]
        self.assertTrue(last.get("done"), last)
        # 1 s at 1000 Hz: the sweep has looked at every entry several times (once every
        # FCACHE_SIZE / FCACHE_SWEEP = 128 ticks). Before, ~700-1,100 of them were alive.
        self.assertEqual(last["alive"], 0, "codes the profiler kept alive: %r" % last)
        self.check_summary(run)
        pad = "x" * self.CODE_NAME_BYTES

        def cut(s):  # as the library does: at 4,096 bytes (max_string_len), these
            return s.encode()[:4096].decode()  # being ASCII there

        codes = set()
        for _, stack, _, _ in samples_of(load(run.files)):
            for name, filename, _ in stack:
                m = re.match(r"^f-(\d+)", name)
                if not m:
                    continue
                n = int(m.group(1))
                odd = "\ufffd" * 3 if n % 2 else ""  # the surrogate's 3 bytes, repaired
                self.assertEqual(name, cut("f-%d%s-%s" % (n, odd, pad)))
                self.assertEqual(filename, cut("/gen/%d%s/%s.py" % (n, odd, pad)))
                codes.add(n)
        self.assertTrue(any(n % 2 for n in codes), "no surrogate name sampled")
        if UNDER_ASAN:
            return  # RSS does not measure the program there (test_many_task_names)
        # RSS after warm-up against the end of the loop: the program alone does not grow
        # (its codes are freed, and their names, given after compiling, are not
        # interned: 3.12 never frees interned strings). What the profiler may hold of
        # them: the dead codes that the sweep has not reached yet, those of the last
        # 128 ticks at most (tens of codes, the same number at both readings), and the
        # windows as in test_many_task_names; 8 MiB cover the noise of both.
        early = next(r for r in reports if r["t"] >= self.WARM_UP)
        late = reports[-2]  # the loop's end, before the sleep
        peak_early = early["recorder"]["window_bytes_peak"]
        peak = late["recorder"]["window_bytes_peak"]
        bound = 8 * 2**20 + 3 * (peak - peak_early)
        growth = (late["rss_kb"] - early["rss_kb"]) * 1024
        kept = len(codes) * 2 * self.CODE_NAME_BYTES  # a name and a file name each
        print("\n  memory: %d codes made, %d in the profiles (%.1f MiB of names), RSS %d KiB "
              "at %.1f s, %d KiB at %.1f s; bound %.1f MiB" % (
                  late["codes"], len(codes), kept / 2**20, early["rss_kb"], early["t"],
                  late["rss_kb"], late["t"], bound / 2**20), file=sys.stderr)
        self.assertLess(growth, bound, (early, late))
        # The test can tell: a profiler keeping the codes it sampled would grow past the
        # bound after the warm-up (before the sweep it grew by 100-250 MiB here).
        self.assertGreater(kept * (1 - self.WARM_UP / self.SECONDS), bound,
                           "too few codes sampled for the test to tell")

    def test_long_surrogate_names(self):
        """Eight threads and eight waiting asyncio tasks named with 1,000,000 characters
        and a lone surrogate: the sampler encodes such a name itself (surrogatepass, for
        the library to repair), and encoded it whole: a thread's name at every pass
        (5 ms a tick with the GIL held for these eight), a task's kept with its stack
        while it waits, 16 MB held in all here. It encodes only the first
        max_string_len + 1 characters (the library's cut is the same), so what it holds
        is bounded by max_string_len. tracemalloc measures it in the program."""
        chars, count = 1_000_000, 8
        run = self.cli(["--rate", "100", "--cpu-budget", "0", "longnames.py", str(chars),
                        str(count)])
        report = run.json()[-1]
        self.check_summary(run)
        # Each name's encoding: at most 4 bytes a character of max_string_len + 1
        # (4,097), held in at most 3 places at once (a thread's, by the passes' references
        # for two passes; a task's, by its stack and a pass). 2 MiB more for the
        # program's own objects (threads, tasks, the event loop). Before: 16 MB.
        held = 2 * count * 3 * 4 * 4097
        self.assertLess(report["current"] - report["base"], held + 2 * 2**20, report)
        # The peak adds what CPython's UTF-8 encoder reserves, 3 bytes a character, before
        # it finds the surrogate (ppk_py_utf8 tries it first; it frees that at once).
        # Before: 26 MB.
        self.assertLess(report["peak"] - report["base"], held + 3 * (chars + 100) + 2 * 2**20,
                        report)
        pad = "y" * chars

        def cut(s):  # at 4,096 bytes (max_string_len), ASCII there
            return s.encode()[:4096].decode()

        seen = collections.Counter()
        for _, _, labels, _ in samples_of(load(run.files)):
            for key in ("thread name", "task name"):
                m = re.match(r"^n\ufffd{3}(\d+)-", labels.get(key, ""))
                if m:
                    self.assertEqual(labels[key], cut("n%s%s-%s" % ("\ufffd" * 3, m.group(1), pad)))
                    seen[key, int(m.group(1)) < count] += 1
        # The threads' names on the threads' samples, the tasks' on the tasks'.
        self.assertEqual(set(seen), {("thread name", True), ("task name", False)}, seen)


if __name__ == "__main__":
    unittest.main()
