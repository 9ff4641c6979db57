"""test_leaks.py - no call of pprofkit._native leaks references or memory.

sys.gettotalrefcount exists only in debug builds of CPython, so leaks are measured: each
API call (and each error path) runs in a loop, first to warm up (free lists, caches, the
builder's scratch, a window's tables reach their steady size), then N times more; across
those N calls two figures must stay flat:

- tracemalloc's traced memory: every Python object's memory. A missing Py_DECREF on an
  object made by the call leaks at least one object per call, and the smallest heap
  object is 32 bytes once allocated (an int past the small-int cache, a short str, a
  one-item tuple...). With N >= 5,000 that is >= 160 KiB; the tolerance, TRACED_TOL = 48
  KiB, is far above the noise measured on 3.11, 3.12 and 3.13 (under 200 bytes: free
  lists and caches settle during the warm-up), and under a third of the smallest leak
  it must catch.
  A leaked reference to an object that is not freed anyway (None, a small int, an
  interned string, the caller's own argument) costs no memory and cannot be seen here.
- the process's resident memory (/proc/self/statm): memory the library allocates with
  malloc (a builder, a recorder's windows, an export's bytes), which tracemalloc does
  not see. RSS_TOL = 1 MiB: RSS moves by pages and malloc keeps what it frees, which
  gives noise of some hundred KiB at most; any object of the library a binding could
  fail to free is far larger per call than RSS_TOL / N (a builder holds tens of KiB, an
  export's bytes over 100 bytes times N >= 20,000 exports). Measured: 0 or 4 KiB
  without a leak; a binding that kept each export's bytes grew by 3.5 MiB. Under
  AddressSanitizer (LD_PRELOAD of libasan) freed memory goes to a quarantine, so RSS is
  not checked there.

The check was itself checked: a build of the module that forgot one Py_DECREF (of an
error's message, or of record()'s values sequence) and one ppk_export_free fails the
tests of every call that goes through them.

Every loop keeps the recorder's window at a steady size (the same strings and stacks, or
an export now and then), so that a flat figure means no leak and nothing else.
"""

import gc
import os
import resource
import tempfile
import tracemalloc
import unittest

import pprofkit

TYPES = [pprofkit.CPU_TIME, pprofkit.SAMPLES]
TRACED_TOL = 48 << 10
RSS_TOL = 1 << 20
ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
PAGE = resource.getpagesize()


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def raises(exc, fn, *args, **kwargs):
    """An operation that must raise exc (checked on every call)."""
    def op():
        try:
            fn(*args, **kwargs)
        except exc:
            return
        raise AssertionError("%r did not raise %s" % (fn, exc.__name__))
    return op


class Hook:
    """A value whose __index__ runs `action` (to change a list being read)."""

    def __init__(self, action, value=1):
        self.action, self.value = action, value

    def __index__(self):
        self.action()
        return self.value


class LeakTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tracemalloc.start()

    @classmethod
    def tearDownClass(cls):
        tracemalloc.stop()

    def setUp(self):
        self.rec = pprofkit.Recorder(TYPES, max_labels=4)
        self.smp = pprofkit.Sample(self.rec)
        self.closed_rec = pprofkit.Recorder(TYPES)
        self.closed_smp = pprofkit.Sample(self.closed_rec)
        self.closed_rec.close()
        self.dead_smp = pprofkit.Sample(self.rec)
        self.dead_smp.close()

    def tearDown(self):
        for o in (self.smp, self.dead_smp, self.closed_smp):
            o.close()
        self.rec.close()

    def check(self, op, n=20000, warmup=None):
        warmup = warmup if warmup is not None else max(n // 5, 1000)
        for _ in range(warmup):
            op()
        gc.collect()
        traced0, rss0 = tracemalloc.get_traced_memory()[0], rss()
        for _ in range(n):
            op()
        gc.collect()
        traced1, rss1 = tracemalloc.get_traced_memory()[0], rss()
        self.assertLess(traced1 - traced0, TRACED_TOL,
                        "traced memory grew by %d bytes over %d calls" % (traced1 - traced0, n))
        if not ASAN:
            self.assertLess(rss1 - rss0, RSS_TOL,
                            "RSS grew by %d bytes over %d calls" % (rss1 - rss0, n))

    # ---- Objects --------------------------------------------------------------------

    def test_recorder_create_close(self):
        def op():
            pprofkit.Recorder(TYPES).close()
        self.check(op, n=5000)

    def test_recorder_with_every_option(self):
        def op():
            with pprofkit.Recorder([("a", "b"), ["c", "d"]], period=10, period_type=("w", "ns"),
                                   export_period_ms=1000, memory_limit=1 << 20,
                                   chunk_size=1 << 16, keep_bytes=1 << 16, max_string_len=64,
                                   max_frames=8, max_labels=8, shards=2, name="n\udc80",
                                   codec="zstd", level=3, builder_keep_bytes=4096,
                                   builder_max_bytes=1 << 16) as r:
                r.sample_types, r.codec, r.closed
        self.check(op, n=5000)

    def test_recorder_freed_without_close(self):
        def op():
            pprofkit.Sample(pprofkit.Recorder(TYPES)).record([("f",)], [1, 1])
        self.check(op, n=5000)

    def test_sample_create_close(self):
        rec = self.rec

        def op():
            pprofkit.Sample(rec).close()
            with pprofkit.Sample(rec) as s:
                s.recorder
            pprofkit.Sample(rec)  # freed without close
        self.check(op)

    # ---- Recording --------------------------------------------------------------------

    def test_builder_calls(self):
        s = self.smp

        def op():
            s.start()
            s.push_frame("leaf", "a.py", 10)
            s.push_frame(b"mid", b"b.py")
            s.push_frame("root")
            s.push_frame("bad\udc80", "f\ud800.py", 2)   # repaired: a bytes copy
            s.push_label("str", "value")
            s.push_label(b"bytes", b"value")
            s.push_label("num", 123456789, "bytes")
            s.push_label("sur\udc80", "v\ud800")
            s.set_value(0, 10 ** 12)
            s.set_values([5, 1])
            s.set_timestamp(123)
            s.set_timestamp(0)
            s.flush()
            s.start()
            s.push_frame("dropped")
            s.drop()
        self.check(op)

    def test_record(self):
        s = self.smp

        def op():
            s.record([("leaf", "a.py", 10), ("mid", "b.py"), ("root",), ["list", "l.py", 3]],
                     [10 ** 12, 1], {"k": "v", "n": 10 ** 9})
            s.record((("f", "f.py", 1),), (1, 1),
                     [("pair", "x"), ("triple", 10 ** 9, "bytes"), ["list", "y"]])
            s.record((f for f in [("g", b"g.py", 1)]), iter([1, 1]), None, 0)
            s.record([("sur\udc80", "x\ud800.py", 1)], [1, 1], {"k\udc80": "v\udc80"})
        self.check(op)

    def test_timestamped_record_and_export(self):
        s, rec = self.smp, self.rec
        count = [0]

        def op():
            s.record([("t", "t.py", 1)], [1, 1], {"k": "v"}, timestamp_ns=10 ** 18 + count[0])
            count[0] += 1
            if count[0] % 500 == 0:
                rec.export()
        self.check(op)

    def test_export(self):
        s, rec = self.smp, self.rec

        def op():
            s.record([("f", "f.py", 1)], [1, 1], {"k": "v"})
            rec.set_endpoint(5, "GET /x")
            rec.add_endpoint_count("GET /x", 2)
            e = rec.export()
            e.data, e.stats, e.seq
        self.check(op)

    def test_export_every_codec(self):
        recs = [pprofkit.Recorder(TYPES, codec=c) for c in ("zstd", "none")]
        try:
            def op():
                for r in recs:
                    r.export()
            self.check(op)
        finally:
            for r in recs:
                r.close()

    def test_export_to_file_sink(self):
        with tempfile.TemporaryDirectory() as d:
            with pprofkit.Recorder(TYPES, out_dir=d) as rec:
                def op():
                    rec.export_to_sinks()
                    for name in os.listdir(d):
                        os.unlink(os.path.join(d, name))
                self.check(op, n=5000)

    def test_stats(self):
        rec = self.rec

        def op():
            rec.stats()
        self.check(op)

    def test_endpoints(self):
        rec = self.rec

        def op():
            rec.set_endpoint(7, "GET /users")
            rec.set_endpoint(8, b"POST /\xff")
            rec.add_endpoint_count("GET /users")
            rec.add_endpoint_count("GET \udc80", 3)
        self.check(op)

    def test_module_functions(self):
        def op():
            pprofkit.strerror(-5)
            pprofkit.strerror(-999)
            pprofkit.now_ns()
        self.check(op)

    # ---- Error paths ------------------------------------------------------------------

    def test_builder_errors(self):
        s = self.smp
        s.start()
        s.push_label("dup", "v")
        IA = pprofkit.InvalidArgumentError
        ops = [
            raises(TypeError, s.push_frame, None),
            raises(TypeError, s.push_frame, "f", 1.5),
            raises(OverflowError, s.push_frame, "f", "f.py", 2 ** 64),
            raises(TypeError, s.push_label, "k", 1.5),
            raises(TypeError, s.push_label, "k", "v", "unit"),
            raises(IA, s.push_label, "dup", "w"),
            raises(IA, s.push_label, "end_timestamp_ns", 1),
            raises(IA, s.push_label, "local root span id", "x"),
            raises(IA, s.push_label, "", "x"),
            raises(IA, s.set_value, 2, 1),
            raises(ValueError, s.set_value, -1, 1),
            raises(OverflowError, s.set_value, 0, 2 ** 63),
            raises(IA, s.set_values, [1, 2, 3]),
            raises(TypeError, s.set_values, [1.0]),
            raises(IA, s.set_timestamp, -1),
            raises(pprofkit.StateError, s.start),
            raises(TypeError, s.push_frame),
        ]

        def op():
            for o in ops:
                o()
        self.check(op)
        s.drop()

    def test_too_many_labels(self):
        s = self.smp

        def op():
            s.start()
            for i in range(4):
                s.push_label("k%d" % i, i)
            try:
                s.push_label("k4", 4)
            except pprofkit.InvalidArgumentError:
                pass
            s.drop()
        self.check(op)

    def test_order_errors(self):
        s = self.smp
        ops = [raises(pprofkit.StateError, f, *a) for f, a in [
            (s.flush, ()), (s.drop, ()), (s.push_frame, ("f",)), (s.push_label, ("k", 1)),
            (s.set_value, (0, 1)), (s.set_timestamp, (1,))]]

        def op():
            for o in ops:
                o()
        self.check(op)

    def test_record_errors(self):
        s = self.smp
        IA = pprofkit.InvalidArgumentError

        def shrinking():
            vals = []
            vals[:] = [Hook(vals.clear), 1]
            return vals
        ops = [
            raises(TypeError, s.record, None, [1, 1]),
            raises(TypeError, s.record, [("f",), "bad"], [1, 1]),
            raises(TypeError, s.record, [("f", "f.py", 1.5)], [1, 1]),
            raises(TypeError, s.record, [("f",)], [1.0, 1]),
            raises(IA, s.record, [("f",)], [1, 2, 3]),
            raises(OverflowError, s.record, [("f",)], [2 ** 64]),
            raises(TypeError, s.record, [("f",)], [1, 1], 5),
            raises(TypeError, s.record, [("f",)], [1, 1], [("k",)]),
            raises(IA, s.record, [("f",)], [1, 1], [("k", "v"), ("k", "w")]),
            raises(IA, s.record, [("f",)], [1, 1], {"end_timestamp_ns": 1}),
            raises(IA, s.record, [("f",)], [1, 1], {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}),
            raises(IA, s.record, [("f",)], [1, 1], None, -1),
            raises(TypeError, s.record, [("f",)]),
            lambda: raises(RuntimeError, s.record, [("f",)], shrinking())(),
        ]

        def op():
            for o in ops:
                o()
        self.check(op)

    def test_closed_errors(self):
        C = pprofkit.ClosedError
        r, cs, ds = self.closed_rec, self.closed_smp, self.dead_smp
        ops = [
            raises(C, r.export), raises(C, r.stats), raises(C, r.start), raises(C, r.stop),
            raises(C, r.set_endpoint, 1, "x"), raises(C, r.add_endpoint_count, "x"),
            raises(C, r.add_file_sink, tempfile.gettempdir()), raises(C, r.__enter__),
            raises(C, pprofkit.Sample, r), raises(C, cs.start),
            raises(C, cs.record, [("f",)], [1, 1], {"k": "v"}),
            raises(C, ds.start), raises(C, ds.push_frame, "f"),
            raises(C, ds.record, [("f",)], [1, 1]),
            r.close, ds.close,
        ]

        def op():
            for o in ops:
                o()
        self.check(op)

    def test_constructor_errors(self):
        IA = pprofkit.InvalidArgumentError
        ops = [
            raises(ValueError, pprofkit.Recorder, []),
            raises(ValueError, pprofkit.Recorder, [("a", "b")] * 17),
            raises(TypeError, pprofkit.Recorder, [("a", "b"), ("c",)]),
            raises(TypeError, pprofkit.Recorder, None),
            raises(ValueError, pprofkit.Recorder, TYPES, codec="lz4"),
            raises(ValueError, pprofkit.Recorder, TYPES, memory_limit=-1),
            raises(TypeError, pprofkit.Recorder, TYPES, name=5),
            raises(TypeError, pprofkit.Recorder, TYPES, period_type="x"),
            raises(IA, pprofkit.Recorder, TYPES, memory_limit=1),       # library refuses
            raises(IA, pprofkit.Recorder, TYPES, period=-1),           # library refuses
            raises(TypeError, pprofkit.Sample, None),
            raises(TypeError, pprofkit.strerror, "x"),
            raises(IA, self.rec.set_endpoint, 0, "x"),
            raises(ValueError, self.rec.set_endpoint, -1, "x"),
            raises(IA, self.rec.add_endpoint_count, "x", -1),
        ]

        def op():
            for o in ops:
                o()
        self.check(op, n=5000)


if __name__ == "__main__":
    unittest.main()
