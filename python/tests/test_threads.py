"""test_threads.py - conservation (G3) with several Python threads at once.

Threads flush samples with known values, each with its own Sample and a label naming the
thread, while other threads export, start and stop the exporter, read statistics or
close the recorder. Every export and every file is decoded with protoc (support.py), and
one file is also read by `go tool pprof`: per thread, the values summed over all of them
must equal what the thread flushed, and the statistics must agree. Timeouts are only
guards against a hang.
"""

import os
import random
import re
import shutil
import sys
import tempfile
import threading
import unittest

import pprofkit
import support

TYPES = [("samples", "count"), ("wall-time", "nanoseconds")]
GUARD = 60  # seconds: a thread still running after this is a hang

FILE_RE = re.compile(r"^profile\.(\d+)\.(\d+)(?:-(\d+))?\.pb\.gz$")


def wall(k, i):
    """The wall-time value of sample i of thread k."""
    return 1000 * (k + 1) + i % 97


def flush_one(s, k, i):
    """Flushes sample i of thread k: even threads use the builder calls, odd ones
    record(). The leaf frame and the label both name the thread."""
    leaf = "work_t%d" % k
    if k % 2 == 0:
        s.start()
        s.push_frame(leaf, "threads.py", i % 50 + 1)
        s.push_frame("main", "threads.py", 1)
        s.push_label("thread", "t%d" % k)
        s.push_label("i_mod", i % 3)
        s.set_value(0, 1)
        s.set_value(1, wall(k, i))
        s.flush()
    else:
        s.record([(leaf, "threads.py", i % 50 + 1), ("main", "threads.py", 1)],
                 [1, wall(k, i)], labels=[("thread", "t%d" % k), ("i_mod", i % 3)])


def expected(k, n):
    return (n, sum(wall(k, i) for i in range(n)))


def totals_by_thread(test, profiles):
    """{"t<k>": (count, wall)} summed over every profile; also checks that each sample's
    leaf frame names the same thread as its label, and the sample types."""
    out = {}
    for p in profiles:
        if p.samples:
            test.assertEqual(p.sample_types, TYPES)
        for stack, labels, values in p.samples:
            t = labels.get("thread")
            test.assertIsNotNone(t, "a sample without its thread label: %r" % (labels,))
            test.assertEqual(stack[0][0], "work_" + t)
            test.assertEqual(stack[1][0], "main")
            c, w = out.get(t, (0, 0))
            out[t] = (c + values[0], w + values[1])
    return out


def profile_files(test, d):
    """The profile files in d, sorted by seq, as (seq, path); fails on any other file
    (a temporary file left behind) or a file of another process."""
    found = []
    for name in os.listdir(d):
        m = FILE_RE.match(name)
        test.assertIsNotNone(m, "unexpected file %r in the output directory" % name)
        test.assertEqual(int(m.group(1)), os.getpid())
        test.assertIsNone(m.group(3), "two exports with the same seq: %r" % name)
        found.append((int(m.group(2)), os.path.join(d, name)))
    return sorted(found)


def read_files(files):
    datas = []
    for _, path in files:
        with open(path, "rb") as f:
            datas.append(f.read())
    return datas


def join_all(test, threads):
    for t in threads:
        t.join(GUARD)
        test.assertFalse(t.is_alive(), "thread %s hung" % t.name)


class Worker(threading.Thread):
    """Runs fn(self) and keeps the exception it raised, if any."""

    def __init__(self, name, fn):
        super().__init__(name=name, daemon=True)
        self.fn = fn
        self.error = None

    def run(self):
        try:
            self.fn(self)
        except BaseException as e:  # reported by the test
            self.error = e


def check_no_errors(test, workers):
    for w in workers:
        if w.error is not None:
            raise AssertionError("thread %s raised %r" % (w.name, w.error)) from w.error


class ThreadsBase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="ppk-threads-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        # Small switch interval: Python threads interleave more often.
        old = sys.getswitchinterval()
        sys.setswitchinterval(1e-4)
        self.addCleanup(sys.setswitchinterval, old)

    def recorder(self, **kw):
        r = pprofkit.Recorder(TYPES, **kw)
        self.addCleanup(r.close)
        return r


class TestFlushWhileExporting(ThreadsBase):
    N_THREADS = 4
    N = 3000  # samples per thread
    STEP = 500  # a flusher waits for a new export every STEP samples

    def run_conservation(self, shards):
        r = self.recorder(shards=shards)
        datas, seqs = [], []
        cond = threading.Condition()
        state = {"exports": 0, "flushers_done": 0}
        barrier = threading.Barrier(self.N_THREADS + 1)

        def wait_export_after(mark):
            # Two more exports: the second one began after this call, so its swap
            # separates the flushes before this call from those after it.
            with cond:
                ok = cond.wait_for(lambda: state["exports"] >= mark + 2, GUARD)
            if not ok:
                raise AssertionError("no export came")

        def flusher(w, k):
            s = pprofkit.Sample(r)
            barrier.wait(GUARD)
            try:
                for i in range(self.N):
                    if i and i % self.STEP == 0:
                        # An export swaps windows between this thread's flushes,
                        # whatever the scheduling.
                        with cond:
                            mark = state["exports"]
                        wait_export_after(mark)
                    flush_one(s, k, i)
            finally:
                s.close()
                with cond:
                    state["flushers_done"] += 1
                    cond.notify_all()

        def exporter(w):
            barrier.wait(GUARD)
            while True:
                with cond:
                    done = state["flushers_done"] == self.N_THREADS
                e = r.export()
                datas.append(e.data)
                seqs.append(e.seq)
                with cond:
                    state["exports"] += 1
                    cond.notify_all()
                if done:
                    break

        workers = [Worker("flusher-%d" % k, lambda w, k=k: flusher(w, k))
                   for k in range(self.N_THREADS)]
        workers.append(Worker("exporter", exporter))
        for w in workers:
            w.start()
        join_all(self, workers)
        check_no_errors(self, workers)

        final = r.export()
        datas.append(final.data)
        seqs.append(final.seq)
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))

        profiles = support.decode_many(datas)
        got = totals_by_thread(self, profiles)
        want = {"t%d" % k: expected(k, self.N) for k in range(self.N_THREADS)}
        self.assertEqual(got, want)
        # Each thread waited for exports between its flushes: its samples are spread
        # over several windows, and still sum up.
        for k in range(self.N_THREADS):
            holding = [p for p in profiles if any(lb.get("thread") == "t%d" % k
                                                  for _, lb, _ in p.samples)]
            self.assertGreaterEqual(len(holding), self.N // self.STEP)

        st = r.stats()
        total = self.N_THREADS * self.N
        self.assertEqual(st["samples_flushed"], total)
        self.assertEqual(st["samples_exported"], total)
        self.assertEqual(st["windows_exported"], len(datas))
        for k in ("samples_dropped_nomem", "samples_dropped_closed", "samples_lost_export",
                  "export_failures", "labels_dropped", "stacks_dropped"):
            self.assertEqual(st[k], 0, k)

    def test_one_shard(self):
        self.run_conservation(shards=1)

    def test_four_shards(self):
        self.run_conservation(shards=4)


class TestBackgroundExporter(ThreadsBase):
    N_THREADS = 4
    N = 2000

    def test_files_hold_everything(self):
        r = self.recorder(out_dir=self.tmp, export_period_ms=20, shards=2)
        r.start()
        barrier = threading.Barrier(self.N_THREADS)

        def wait_windows(n):
            # A hang guard only: the exporter runs every 20 ms.
            for _ in range(GUARD * 100):
                if r.stats()["windows_exported"] >= n:
                    return
                threading.Event().wait(0.01)
            raise AssertionError("the background exporter did not export")

        def flusher(w, k):
            with pprofkit.Sample(r) as s:
                barrier.wait(GUARD)
                for i in range(self.N):
                    if i == self.N // 2:
                        # Two more exports: the swap of the second one separates the
                        # two halves.
                        wait_windows(r.stats()["windows_exported"] + 2)
                    flush_one(s, k, i)

        workers = [Worker("flusher-%d" % k, lambda w, k=k: flusher(w, k))
                   for k in range(self.N_THREADS)]
        for w in workers:
            w.start()
        join_all(self, workers)
        check_no_errors(self, workers)

        st = r.stats()  # the recorder is freed by close()
        total = self.N_THREADS * self.N
        self.assertEqual(st["samples_flushed"], total)
        self.assertEqual(st["samples_dropped_closed"], 0)
        self.assertEqual(st["sink_failures"], 0)
        r.close()
        self.assertTrue(r.closed)
        with self.assertRaises(pprofkit.ClosedError):
            r.stats()

        files = profile_files(self, self.tmp)
        seqs = [q for q, _ in files]
        self.assertEqual(seqs, list(range(1, len(seqs) + 1)))
        self.assertGreaterEqual(len(files), max(2, st["windows_exported"]))
        datas = read_files(files)
        profiles = support.decode_many(datas)
        want = {"t%d" % k: expected(k, self.N) for k in range(self.N_THREADS)}
        self.assertEqual(totals_by_thread(self, profiles), want)
        for k in range(self.N_THREADS):
            holding = [p for p in profiles if any(lb.get("thread") == "t%d" % k
                                                  for _, lb, _ in p.samples)]
            self.assertGreaterEqual(len(holding), 2)

        # go tool pprof reads the fullest file, and sees there what protoc sees.
        i = max(range(len(profiles)), key=lambda j: len(profiles[j].samples))
        self.assertGreater(len(profiles[i].samples), 0)
        flat, _ = support.go_top(files[i][1], sample_index="samples")
        flat = {f: v for f, v in flat.items() if v}
        by_leaf = profiles[i].by("samples", lambda stack, labels: stack[0][0])
        self.assertGreater(len(flat), 0)
        for f, v in by_leaf.items():
            if f in flat:
                self.assertEqual(flat[f], v, f)
            else:
                # go tool pprof -top leaves out nodes under 0.5% of the total (its
                # default -nodefraction), whatever -nodecount says.
                self.assertLess(v, 0.005 * profiles[i].total("samples"), f)
        self.assertLessEqual(set(flat), set(by_leaf))


class TestCloseWhileBusy(ThreadsBase):
    N_THREADS = 4

    def test_close_while_flushing_and_exporting(self):
        r = self.recorder(out_dir=self.tmp, shards=2)
        lock = threading.Lock()
        flushed = {}  # thread -> (count, wall) of the flushes that succeeded
        datas = []
        snapshots = []
        progress = threading.Semaphore(0)

        def flusher(w, k):
            s = pprofkit.Sample(r)
            n = wsum = 0
            try:
                i = 0
                while True:
                    try:
                        flush_one(s, k, i)
                    except pprofkit.ClosedError:
                        break
                    n += 1
                    wsum += wall(k, i)
                    if n == 300:
                        progress.release()
                    i += 1
            finally:
                with lock:
                    flushed["t%d" % k] = (n, wsum)
                s.close()

        def exporter(w):
            n = 0
            while True:
                try:
                    e = r.export()
                except pprofkit.ClosedError:
                    break
                with lock:
                    datas.append(e.data)
                n += 1
                if n == 3:
                    progress.release()

        def reader(w):
            while True:
                try:
                    snapshots.append(r.stats())
                except pprofkit.ClosedError:
                    break

        workers = [Worker("flusher-%d" % k, lambda w, k=k: flusher(w, k))
                   for k in range(self.N_THREADS)]
        workers += [Worker("exporter", exporter), Worker("stats", reader)]
        for w in workers:
            w.start()
        for _ in range(self.N_THREADS + 1):
            self.assertTrue(progress.acquire(timeout=GUARD), "no progress")
        st = r.stats()
        self.assertEqual(st["samples_dropped_closed"], 0)
        # Two threads close at once, while the others go on.
        closers = [Worker("close-%d" % j, lambda w: r.close()) for j in range(2)]
        for c in closers:
            c.start()
        join_all(self, closers + workers)
        check_no_errors(self, closers + workers)
        self.assertTrue(r.closed)
        with self.assertRaises(pprofkit.ClosedError):
            pprofkit.Sample(r)
        with self.assertRaises(pprofkit.ClosedError):
            r.export()

        # Every flush that succeeded is in an export or in a file written by close().
        profiles = support.decode_many(datas + read_files(profile_files(self, self.tmp)))
        self.assertEqual(totals_by_thread(self, profiles), flushed)
        for k in range(self.N_THREADS):
            self.assertGreaterEqual(flushed["t%d" % k][0], 300)
        # The statistics read meanwhile only grew, and never showed more exported than
        # flushed.
        self.assertGreater(len(snapshots), 0)
        for a, b in zip(snapshots, snapshots[1:]):
            self.assertLessEqual(a["samples_flushed"], b["samples_flushed"])
            self.assertLessEqual(a["samples_exported"], b["samples_exported"])
        for s in snapshots:
            self.assertLessEqual(s["samples_exported"], s["samples_flushed"])
            self.assertEqual(s["samples_dropped_closed"], 0)


class TestConcurrentControl(ThreadsBase):
    N_FLUSHERS = 2
    N = 3000
    N_CONTROLLERS = 4
    ROUNDS = 150

    def test_export_stop_start_stats_at_once(self):
        r = self.recorder(out_dir=self.tmp, export_period_ms=5, shards=2)
        r.start()
        lock = threading.Lock()
        exports = []  # (seq, data) of export()

        def flusher(w, k):
            with pprofkit.Sample(r) as s:
                for i in range(self.N):
                    flush_one(s, k, i)

        def controller(w, j):
            rng = random.Random(j)
            last = None
            for _ in range(self.ROUNDS):
                op = rng.choice(["export", "export", "export_to_sinks", "stop", "start",
                                 "stats", "stats"])
                if op == "export":
                    e = r.export()
                    with lock:
                        exports.append((e.seq, e.data))
                elif op == "stats":
                    st = r.stats()
                    self.assertLessEqual(st["samples_exported"], st["samples_flushed"])
                    if last is not None:
                        self.assertLessEqual(last["samples_flushed"], st["samples_flushed"])
                        self.assertLessEqual(last["windows_exported"], st["windows_exported"])
                    last = st
                else:
                    getattr(r, op)()

        workers = [Worker("flusher-%d" % k, lambda w, k=k: flusher(w, k))
                   for k in range(self.N_FLUSHERS)]
        workers += [Worker("control-%d" % j, lambda w, j=j: controller(w, j))
                    for j in range(self.N_CONTROLLERS)]
        for w in workers:
            w.start()
        join_all(self, workers)
        check_no_errors(self, workers)

        r.stop()
        e = r.export()
        exports.append((e.seq, e.data))
        st = r.stats()
        total = self.N_FLUSHERS * self.N
        self.assertEqual(st["samples_flushed"], total)
        self.assertEqual(st["samples_exported"], total)
        self.assertEqual(st["sink_failures"], 0)
        self.assertEqual(st["export_failures"], 0)

        # Exports were serialized: every seq once, either returned or written to a file.
        files = profile_files(self, self.tmp)
        seqs = sorted([q for q, _ in exports] + [q for q, _ in files])
        self.assertEqual(seqs, list(range(1, st["windows_exported"] + 1)))

        profiles = support.decode_many([d for _, d in exports] + read_files(files))
        want = {"t%d" % k: expected(k, self.N) for k in range(self.N_FLUSHERS)}
        self.assertEqual(totals_by_thread(self, profiles), want)


if __name__ == "__main__":
    unittest.main()
