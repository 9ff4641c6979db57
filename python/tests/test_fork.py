"""test_fork.py - a Recorder made before fork() works in the child (G6), and nothing is
lost on either side (G3).

The child records and exports its own samples only: what the parent flushed before the
fork stays the parent's to export, and the parent exports it after the fork. Children
made with os.fork() send their results through a pipe and leave with os._exit(); a
child that does not finish within GUARD seconds is killed and the test fails (a hang
is the bug these tests look for). multiprocessing's "fork" start method is tested with
a Pool and a Process using a module-level recorder. Exports are decoded by protoc.
"""

import multiprocessing
import os
import pickle
import re
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
import unittest
import warnings

import pprofkit
import support

TYPES = [("samples", "count"), ("wall-time", "nanoseconds")]
GUARD = 30  # seconds a child may take before it counts as hung

FILE_RE = re.compile(r"^profile\.(\d+)\.(\d+)(?:-\d+)?\.pb\.gz$")

# GCC's AddressSanitizer malloc can deadlock in the child of a multi-threaded process
# (include/pprofkit.h, section 4): under ASan, these cases' children now and then block
# in the ASan allocator's lock, held at the fork by another thread of the parent. The
# cases that fork while other threads run are skipped under ASan for that reason only.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
ASAN_FORK_REASON = ("GCC's ASan malloc can deadlock in a forked child of a multi-threaded "
                    "process (include/pprofkit.h, section 4)")


def quiet_fork_warnings():
    """Python 3.12+ warns that fork() in a multi-threaded process may deadlock: that is
    what these tests check, for pprofkit's part."""
    ctx = warnings.catch_warnings()
    ctx.__enter__()
    warnings.filterwarnings("ignore", category=DeprecationWarning,
                            message=r".*(fork|multi-threaded).*")
    return ctx


def record(s, who, n, base=0):
    """Flushes n samples labelled who=<who>; returns (count, wall) flushed."""
    wsum = 0
    for i in range(n):
        v = base + i % 13 + 1
        s.record([("leaf_" + who, "fork.py", i % 7 + 1), ("main", "fork.py", 1)], [1, v],
                 labels={"who": who})
        wsum += v
    return (n, wsum)


def totals_by_who(profiles):
    out = {}
    for p in profiles:
        for stack, labels, values in p.samples:
            who = labels.get("who")
            assert stack[0][0] == "leaf_%s" % who, (stack, labels)
            c, w = out.get(who, (0, 0))
            out[who] = (c + values[0], w + values[1])
    return out


def run_child(test, fn, guard=GUARD):
    """Forks; the child runs fn() and sends its result back (pickled) through a pipe,
    then leaves with os._exit. Returns the result; fails if the child raised, died or
    hung (it is then killed). The child is always reaped."""
    rfd, wfd = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    ctx = quiet_fork_warnings()
    try:
        pid = os.fork()
    finally:
        ctx.__exit__(None, None, None)
    if pid == 0:
        code = 1
        try:
            os.close(rfd)
            try:
                payload = pickle.dumps(("ok", fn()))
                code = 0
            except BaseException:
                payload = pickle.dumps(("error", traceback.format_exc()))
            with os.fdopen(wfd, "wb") as f:
                f.write(payload)
        finally:
            os._exit(code)
    os.close(wfd)
    deadline = time.monotonic() + guard
    chunks = []
    hung = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                hung = True
                break
            ready, _, _ = select.select([rfd], [], [], left)
            if not ready:
                continue
            b = os.read(rfd, 65536)
            if not b:
                break
            chunks.append(b)
        status = None
        while not hung:
            w, st = os.waitpid(pid, os.WNOHANG)
            if w == pid:
                status = st
                break
            if time.monotonic() > deadline:
                hung = True
                break
            time.sleep(0.01)
        if hung:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            test.fail("the child %d hung (killed after %d s)" % (pid, guard))
    finally:
        os.close(rfd)
    if not chunks:
        test.fail("the child died without a result (status %r)" % (status,))
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        test.fail("in the child:\n" + value)
    test.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0,
                    "child status %r" % (status,))
    return value


def files_by_pid(test, d):
    """{pid: [(seq, path)...] sorted by seq} of the profile files in d; no other file."""
    out = {}
    for name in os.listdir(d):
        m = FILE_RE.match(name)
        test.assertIsNotNone(m, "unexpected file %r" % name)
        out.setdefault(int(m.group(1)), []).append((int(m.group(2)), os.path.join(d, name)))
    return {pid: sorted(v) for pid, v in out.items()}


def read_all(files):
    out = []
    for _, path in files:
        with open(path, "rb") as f:
            out.append(f.read())
    return out


class ForkBase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ppk-fork-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def recorder(self, **kw):
        r = pprofkit.Recorder(TYPES, **kw)
        self.addCleanup(r.close)
        return r


class TestOsFork(ForkBase):
    def test_child_records_its_own_samples(self):
        r = self.recorder()
        s = pprofkit.Sample(r)
        self.addCleanup(s.close)
        first = record(s, "parent", 100)
        e1 = r.export()
        before = record(s, "parent", 70, base=100)  # in the window at the fork

        def child():
            st0 = r.stats()
            # The builder made before the fork works in the child, and so does a new one.
            a = record(s, "child", 50, base=1000)
            with pprofkit.Sample(r) as s2:
                b = record(s2, "child", 30, base=2000)
            e = r.export()
            st = r.stats()
            r.close()
            return {"st0": st0, "st": st, "data": e.data, "seq": e.seq,
                    "flushed": (a[0] + b[0], a[1] + b[1])}

        res = run_child(self, child)
        self.assertEqual(res["st0"]["samples_flushed"], 0)
        self.assertEqual(res["st0"]["samples_exported"], 0)
        self.assertEqual(res["st"]["samples_flushed"], 80)
        self.assertEqual(res["st"]["samples_exported"], 80)
        self.assertEqual(res["seq"], 1)
        self.assertEqual(totals_by_who([support.decode(res["data"])]),
                         {"child": res["flushed"]})

        # The parent is unaffected: its window still holds what it flushed before the
        # fork, and its builder goes on.
        after = record(s, "parent", 20, base=200)
        e2 = r.export()
        self.assertEqual(e2.seq, 2)
        self.assertEqual(totals_by_who([support.decode(e1.data)]), {"parent": first})
        self.assertEqual(totals_by_who([support.decode(e2.data)]),
                         {"parent": (before[0] + after[0], before[1] + after[1])})
        st = r.stats()
        self.assertEqual(st["samples_flushed"], 190)
        self.assertEqual(st["samples_exported"], 190)

    def test_two_generations(self):
        """A child's child works too, and each exports only its own samples."""
        r = self.recorder(shards=2)
        s = pprofkit.Sample(r)
        self.addCleanup(s.close)
        mine = record(s, "parent", 40)

        def grandchild():
            got = record(s, "grandchild", 10, base=300)
            return {"data": r.export().data, "flushed": got}

        def child():
            got = record(s, "child", 20, base=100)
            inner = run_child(self, grandchild)
            e = r.export()
            r.close()
            return {"data": e.data, "flushed": got, "inner": inner}

        res = run_child(self, child)
        self.assertEqual(totals_by_who([support.decode(res["data"])]),
                         {"child": res["flushed"]})
        self.assertEqual(totals_by_who([support.decode(res["inner"]["data"])]),
                         {"grandchild": res["inner"]["flushed"]})
        self.assertEqual(totals_by_who([support.decode(r.export().data)]), {"parent": mine})

    @unittest.skipIf(UNDER_ASAN, ASAN_FORK_REASON)
    def test_background_exporter_and_files(self):
        r = self.recorder(out_dir=self.tmp, export_period_ms=20)
        r.start()
        s = pprofkit.Sample(r)
        self.addCleanup(s.close)
        parent = record(s, "parent", 200)
        tmp = self.tmp

        def child():
            me = os.getpid()
            got = record(s, "child", 100, base=50)
            # The exporter thread did not survive the fork: the child's flushes start
            # it again, and it writes the child's files.
            deadline = time.monotonic() + GUARD
            while not any(n.startswith("profile.%d." % me) for n in os.listdir(tmp)):
                if time.monotonic() > deadline:
                    raise AssertionError("no file from the child's exporter")
                time.sleep(0.005)
            more = record(s, "child", 100, base=60)
            st = r.stats()
            r.close()
            return {"pid": me, "st": st, "flushed": (got[0] + more[0], got[1] + more[1])}

        res = run_child(self, child)
        more = record(s, "parent", 200, base=7)
        st = r.stats()
        r.close()

        self.assertEqual(res["st"]["samples_flushed"], 200)
        self.assertEqual(st["samples_flushed"], 400)
        files = files_by_pid(self, self.tmp)
        self.assertEqual(sorted(files), sorted([os.getpid(), res["pid"]]))
        for pid, fl in files.items():
            self.assertEqual([q for q, _ in fl], list(range(1, len(fl) + 1)), pid)
        child_totals = totals_by_who(support.decode_many(read_all(files[res["pid"]])))
        self.assertEqual(child_totals, {"child": res["flushed"]})
        parent_totals = totals_by_who(support.decode_many(read_all(files[os.getpid()])))
        self.assertEqual(parent_totals,
                         {"parent": (parent[0] + more[0], parent[1] + more[1])})

    @unittest.skipIf(UNDER_ASAN, ASAN_FORK_REASON)
    def test_fork_while_other_threads_export_and_flush(self):
        r = self.recorder(shards=2)
        stop = threading.Event()
        lock = threading.Lock()
        datas = []
        flushed = {"n": 0, "w": 0}
        errors = []

        def flusher():
            try:
                with pprofkit.Sample(r) as s:
                    i = 0
                    while not stop.is_set():
                        c, w = record(s, "flusher", 1, base=i % 100)
                        with lock:
                            flushed["n"] += c
                            flushed["w"] += w
                        i += 1
            except BaseException as e:
                errors.append(e)

        def exporter():
            try:
                while not stop.is_set():
                    d = r.export().data
                    with lock:
                        datas.append(d)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=flusher, daemon=True),
                   threading.Thread(target=exporter, daemon=True)]
        for t in threads:
            t.start()

        def child():
            # The window at the fork is the parent's: the child's first export is
            # empty, whatever the threads of the parent were doing.
            e0 = r.export()
            with pprofkit.Sample(r) as s:
                got = record(s, "child", 10, base=500)
            e1 = r.export()
            st = r.stats()
            r.close()
            return {"d0": e0.data, "d1": e1.data, "st": st, "flushed": got}

        try:
            for _ in range(8):
                # Let the threads run between forks.
                with lock:
                    mark = len(datas), flushed["n"]
                deadline = time.monotonic() + GUARD
                while True:
                    with lock:
                        now = len(datas), flushed["n"]
                    if now[0] > mark[0] + 2 and now[1] > mark[1] + 50:
                        break
                    self.assertLess(time.monotonic(), deadline, "the threads are stuck")
                    time.sleep(0.001)
                res = run_child(self, child)
                p0, p1 = support.decode_many([res["d0"], res["d1"]])
                self.assertEqual(p0.samples, [])
                self.assertEqual(totals_by_who([p1]), {"child": res["flushed"]})
                self.assertEqual(res["st"]["samples_flushed"], 10)
                self.assertEqual(res["st"]["samples_exported"], 10)
        finally:
            stop.set()
            for t in threads:
                t.join(GUARD)
        self.assertFalse(any(t.is_alive() for t in threads), "a thread hung")
        self.assertEqual(errors, [])
        datas.append(r.export().data)
        got = totals_by_who(support.decode_many(datas))
        self.assertEqual(got, {"flusher": (flushed["n"], flushed["w"])})
        st = r.stats()
        self.assertEqual(st["samples_flushed"], flushed["n"])
        self.assertEqual(st["samples_exported"], flushed["n"])


# ---- multiprocessing, start method "fork" ------------------------------------------------

# A module-level recorder, as a profiler would have; made by the tests below.
MP_RECORDER = None


def mp_task(task):
    """Runs in a worker: records task-labelled samples into the inherited recorder,
    exports, and returns the export decoded by protoc, as totals."""
    with pprofkit.Sample(MP_RECORDER) as s:
        flushed = record(s, "task%d" % task, 50 + task, base=task)
    p = support.decode(MP_RECORDER.export().data)
    return os.getpid(), flushed, totals_by_who([p]), MP_RECORDER.stats()["samples_flushed"]


def mp_process(conn):
    try:
        conn.send(("ok", mp_task(99)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    conn.close()


class TestMultiprocessing(ForkBase):
    def setUp(self):
        super().setUp()
        global MP_RECORDER
        MP_RECORDER = self.recorder()
        self.addCleanup(globals().__setitem__, "MP_RECORDER", None)
        self.sample = pprofkit.Sample(MP_RECORDER)
        self.addCleanup(self.sample.close)
        self.before = record(self.sample, "parent", 300)
        self.ctx = multiprocessing.get_context("fork")
        self.warnings = quiet_fork_warnings()
        self.addCleanup(self.warnings.__exit__, None, None, None)

    def check_parent(self):
        got = totals_by_who([support.decode(MP_RECORDER.export().data)])
        self.assertEqual(got, {"parent": self.before})
        self.assertEqual(MP_RECORDER.stats()["samples_flushed"], self.before[0])

    def test_pool(self):
        tasks = list(range(6))
        with self.ctx.Pool(2) as pool:
            results = pool.map_async(mp_task, tasks, chunksize=1).get(GUARD)
            pool.close()
            pool.join()
        self.assertEqual(len(results), len(tasks))
        for task, (pid, flushed, totals, _) in zip(tasks, results):
            self.assertNotEqual(pid, os.getpid())
            # Each export holds its task's samples only: not the parent's, not those of
            # an earlier task of the same worker (exported by that task).
            self.assertEqual(totals, {"task%d" % task: flushed})
        # A worker's flush count covers its own tasks only.
        by_pid = {}
        for pid, flushed, _, n in results:
            by_pid.setdefault(pid, []).append((flushed[0], n))
        for runs in by_pid.values():
            total = 0
            for count, n in runs:
                total += count
                self.assertEqual(n, total)
        self.check_parent()

    def test_process(self):
        recv, send = self.ctx.Pipe(duplex=False)
        p = self.ctx.Process(target=mp_process, args=(send,))
        p.start()
        send.close()
        try:
            self.assertTrue(recv.poll(GUARD), "the process hung")
            kind, value = recv.recv()
        finally:
            p.join(GUARD)
            if p.is_alive():
                p.kill()
                p.join()
            recv.close()
        if kind == "error":
            self.fail("in the process:\n" + value)
        self.assertEqual(p.exitcode, 0)
        pid, flushed, totals, n = value
        self.assertEqual(pid, p.pid)
        self.assertEqual(totals, {"task99": flushed})
        self.assertEqual(n, flushed[0])
        self.check_parent()


if __name__ == "__main__":
    unittest.main()
