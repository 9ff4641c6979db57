"""test_errors.py - every error path of pprofkit._native, and calls that re-enter it.

Each bad argument must raise the documented exception (pprofkit.Error with .code and
.message, or the built-in TypeError / OverflowError / ValueError of a conversion) and
leave the state as it was: a failed push leaves the sample as it was, a failed record()
records nothing. "Nothing recorded" is checked on the export, read by protoc (support.py),
not on the binding's own counters only. Lone surrogates and invalid UTF-8 are never an
error: the library repairs them to U+FFFD and counts the repair.

Re-entrancy: objects whose __index__ or __iter__ run Python code in the middle of a call
(close the Sample, close the Recorder, use the same Sample, change the list being read),
from the same thread and from another one. The process must not crash; the call raises or
completes cleanly, and the objects stay usable (or cleanly closed) afterwards.
"""

import os
import tempfile
import threading
import unittest

import pprofkit
from pprofkit import _native

import support

TYPES = [pprofkit.CPU_TIME, pprofkit.SAMPLES]


def samples_of(rec):
    """The samples of rec's next export, decoded by protoc."""
    return support.decode(rec.export().data).samples


class Base(unittest.TestCase):
    def setUp(self):
        self.rec = pprofkit.Recorder(TYPES, max_labels=4)
        self.smp = pprofkit.Sample(self.rec)

    def tearDown(self):
        self.smp.close()
        self.rec.close()

    def assertRecordsNothing(self, exc, fn, *args, **kwargs):
        """fn(*args, **kwargs) raises exc and nothing reaches the window; the builder
        records a good sample right after (so the failure left it reusable)."""
        before = self.rec.stats()["samples_flushed"]
        with self.assertRaises(exc):
            fn(*args, **kwargs)
        self.assertEqual(self.rec.stats()["samples_flushed"], before)
        self.assertEqual(samples_of(self.rec), [])
        self.smp.record([("ok", "ok.py", 1)], [7, 1])
        self.assertEqual(samples_of(self.rec), [([("ok", "ok.py", 1)], {}, [7, 1])])


class HierarchyTest(unittest.TestCase):
    def test_classes(self):
        P = pprofkit
        for cls in (P.InvalidArgumentError, P.OutOfMemoryError, P.StateError,
                    P.ClosedError, P.CompressError, P.SystemCallError):
            self.assertTrue(issubclass(cls, P.Error), cls)
        self.assertTrue(issubclass(P.Error, Exception))
        self.assertTrue(issubclass(P.InvalidArgumentError, ValueError))
        self.assertTrue(issubclass(P.OutOfMemoryError, MemoryError))
        self.assertTrue(issubclass(P.SystemCallError, OSError))
        self.assertFalse(issubclass(P.StateError, ValueError))
        self.assertFalse(issubclass(P.ClosedError, ValueError))

    def test_code_and_message(self):
        rec = pprofkit.Recorder(TYPES)
        smp = pprofkit.Sample(rec)
        try:
            with self.assertRaises(pprofkit.StateError) as cm:
                smp.flush()
            e = cm.exception
            self.assertEqual(e.code, _native.PPK_ESTATE)
            self.assertEqual(e.message, pprofkit.strerror(_native.PPK_ESTATE))
            self.assertIn(e.message, str(e))
            self.assertIn("Sample.flush", str(e))
            smp.start()
            with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
                smp.set_value(2, 1)
            self.assertEqual(cm.exception.code, _native.PPK_EINVAL)
        finally:
            smp.close()
            rec.close()

    def test_constants_and_strerror(self):
        codes = {name: getattr(_native, name) for name in dir(_native)
                 if name.startswith("PPK_E") or name == "PPK_OK"}
        expected = {"PPK_OK": 0, "PPK_EINVAL": -1, "PPK_ENOMEM": -2, "PPK_ENULL": -3,
                    "PPK_EVALUES": -4, "PPK_EDUPLABEL": -5, "PPK_ESPANID": -6,
                    "PPK_ERESERVED": -7, "PPK_ETOOMANY": -8, "PPK_EEMPTYKEY": -9,
                    "PPK_ECOMPRESS": -10, "PPK_ESTATE": -11, "PPK_ECLOSED": -12,
                    "PPK_ESYS": -13, "PPK_ESTALE": -14, "PPK_EFULL": -15,
                    "PPK_ETIMEDOUT": -16, "PPK_EFORMAT": -17, "PPK_ETOOBIG": -18}
        self.assertEqual(codes, expected)
        messages = {pprofkit.strerror(c) for c in codes.values()}
        self.assertEqual(len(messages), len(codes))  # one distinct message per code
        self.assertEqual(pprofkit.strerror(0), "success")
        self.assertEqual(pprofkit.strerror(-1), "invalid argument")
        unknown = pprofkit.strerror(-999)
        self.assertNotIn(unknown, messages)
        self.assertEqual(pprofkit.strerror(2 ** 100), unknown)
        self.assertEqual(pprofkit.strerror(-(2 ** 100)), unknown)
        self.assertEqual(pprofkit.strerror(12), unknown)
        for bad in ("-1", None, 1.0, [-1]):
            with self.assertRaises(TypeError):
                pprofkit.strerror(bad)


class BuilderErrorsTest(Base):
    """A failed builder call raises and leaves the sample as it was: the sample flushed
    afterwards holds exactly the good pushes."""

    def check(self, exc, fn, *args):
        self.smp.start()
        self.smp.push_frame("leaf", "a.py", 3)
        self.smp.push_label("good", "yes")
        with self.assertRaises(exc):
            fn(*args)
        self.smp.set_value(0, 5)
        self.smp.set_value(1, 1)
        self.smp.flush()
        self.assertEqual(samples_of(self.rec),
                         [([("leaf", "a.py", 3)], {"good": "yes"}, [5, 1])],
                         "after %r%r" % (fn.__name__, args))

    def test_push_frame(self):
        f = self.smp.push_frame
        self.check(TypeError, f, None)
        self.check(TypeError, f, 1.5)
        self.check(TypeError, f, ["name"])
        self.check(TypeError, f, object())
        self.check(TypeError, f, "n", 1)
        self.check(TypeError, f, "n", ["a.py"])
        self.check(TypeError, f, "n", "a.py", 1.0)
        self.check(TypeError, f, "n", "a.py", "1")
        self.check(OverflowError, f, "n", "a.py", 2 ** 63)
        self.check(OverflowError, f, "n", "a.py", -(2 ** 63) - 1)
        self.check(TypeError, f)
        self.check(TypeError, f, "n", "a.py", 1, 2)

    def test_push_label(self):
        f = self.smp.push_label
        self.check(TypeError, f, None, "v")
        self.check(TypeError, f, 1, "v")
        self.check(TypeError, f, "k", None)
        self.check(TypeError, f, "k", 1.5)
        self.check(TypeError, f, "k", ["v"])
        self.check(TypeError, f, "k", object())
        self.check(TypeError, f, "k", "v", "unit")  # a unit is for numbers only
        self.check(TypeError, f, "k", 1, 2)
        self.check(OverflowError, f, "k", 2 ** 64)
        self.check(TypeError, f, "k")
        self.check(pprofkit.InvalidArgumentError, f, "good", "again")   # duplicate
        self.check(pprofkit.InvalidArgumentError, f, b"good", 1)        # bytes, same key
        self.check(pprofkit.InvalidArgumentError, f, "end_timestamp_ns", 1)
        self.check(pprofkit.InvalidArgumentError, f, "local root span id", "x")
        self.check(pprofkit.InvalidArgumentError, f, "local root span id", 0)
        self.check(pprofkit.InvalidArgumentError, f, "", "v")
        self.check(pprofkit.InvalidArgumentError, f, b"", 1)

    def test_error_codes_of_labels(self):
        self.smp.start()
        self.smp.push_label("k", "v")
        cases = [(("k", "w"), _native.PPK_EDUPLABEL),
                 (("end_timestamp_ns", 1), _native.PPK_ERESERVED),
                 (("local root span id", "x"), _native.PPK_ESPANID),
                 (("", "v"), _native.PPK_EEMPTYKEY)]
        for args, code in cases:
            with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
                self.smp.push_label(*args)
            self.assertEqual(cm.exception.code, code, args)
        self.smp.drop()

    def test_too_many_labels(self):
        self.smp.start()
        for i in range(4):  # max_labels=4
            self.smp.push_label("k%d" % i, i)
        with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
            self.smp.push_label("k4", 4)
        self.assertEqual(cm.exception.code, _native.PPK_ETOOMANY)
        self.smp.set_value(1, 1)
        self.smp.flush()
        (stack, labels, values), = samples_of(self.rec)
        self.assertEqual(labels, {"k0": 0, "k1": 1, "k2": 2, "k3": 3})

    def test_values(self):
        self.check(ValueError, self.smp.set_value, -1, 1)
        self.check(pprofkit.InvalidArgumentError, self.smp.set_value, 2, 1)
        self.check(OverflowError, self.smp.set_value, 2 ** 64, 1)
        self.check(TypeError, self.smp.set_value, 0.0, 1)
        self.check(TypeError, self.smp.set_value, None, 1)
        self.check(TypeError, self.smp.set_value, 0, 1.0)
        self.check(TypeError, self.smp.set_value, 0, "1")
        self.check(OverflowError, self.smp.set_value, 0, 2 ** 63)
        self.check(TypeError, self.smp.set_value, 0)
        self.check(pprofkit.InvalidArgumentError, self.smp.set_values, [1, 2, 3])
        self.check(TypeError, self.smp.set_values, [1.0])
        self.check(TypeError, self.smp.set_values, None)
        self.check(TypeError, self.smp.set_values, 5)
        with self.assertRaises(pprofkit.InvalidArgumentError) as cm:
            self.smp.set_values(list(range(17)))
        self.assertEqual(cm.exception.code, _native.PPK_EVALUES)

    def test_timestamp(self):
        self.check(TypeError, self.smp.set_timestamp, 1.0)
        self.check(TypeError, self.smp.set_timestamp, None)
        self.check(OverflowError, self.smp.set_timestamp, 2 ** 63)
        self.check(pprofkit.InvalidArgumentError, self.smp.set_timestamp, -1)


class RecordErrorsTest(Base):
    """record() with any bad part raises and records nothing."""

    def test_bad_frames(self):
        ok = [1, 1]
        for frames, exc in [
            (None, TypeError), (5, TypeError), ("abc", TypeError),
            ([None], TypeError), (["name"], TypeError), ([b"name"], TypeError),
            ([5], TypeError), ([()], TypeError), ([("a", "b", 1, 2)], TypeError),
            ([("a", "b", 1.5)], TypeError), ([(None, "b", 1)], TypeError),
            ([("a", 3, 1)], TypeError), ([("a", "b", 2 ** 64)], OverflowError),
            ([("good", "g.py", 1), ("bad", "b.py", "x")], TypeError),
        ]:
            with self.subTest(frames=frames):
                self.assertRecordsNothing(exc, self.smp.record, frames, ok)

    def test_bad_values(self):
        fr = [("f", "f.py", 1)]
        for values, exc in [
            (None, TypeError), (1, TypeError), ([1.0, 1], TypeError), (["1"], TypeError),
            ([None], TypeError), ([2 ** 63], OverflowError), ([1, -(2 ** 63) - 1], OverflowError),
            ([1, 2, 3], pprofkit.InvalidArgumentError), (list(range(17)), pprofkit.InvalidArgumentError),
        ]:
            with self.subTest(values=values):
                self.assertRecordsNothing(exc, self.smp.record, fr, values)

    def test_bad_labels(self):
        fr = [("f", "f.py", 1)]
        IA = pprofkit.InvalidArgumentError
        for labels, exc in [
            (5, TypeError), ([("k",)], TypeError), ([("k", "v", "u", "x")], TypeError),
            ([5], TypeError), ({"k": 1.5}, TypeError), ({"k": None}, TypeError),
            ({1: "v"}, TypeError), ([("k", "v", "unit")], TypeError),
            ([("k", 1, 5)], TypeError), ({"k": 2 ** 64}, OverflowError),
            ([("k", "v"), ("k", "w")], IA), ([("k", "v"), (b"k", 1)], IA),
            ({"end_timestamp_ns": 5}, IA), ({"local root span id": "x"}, IA),
            ({"local root span id": 0}, IA), ({"": "v"}, IA),
            ({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}, IA),
        ]:
            with self.subTest(labels=labels):
                self.assertRecordsNothing(exc, self.smp.record, fr, [1, 1], labels)

    def test_bad_timestamp(self):
        fr = [("f", "f.py", 1)]
        self.assertRecordsNothing(TypeError, self.smp.record, fr, [1, 1], None, 1.5)
        self.assertRecordsNothing(OverflowError, self.smp.record, fr, [1, 1], None, 2 ** 63)
        self.assertRecordsNothing(pprofkit.InvalidArgumentError, self.smp.record, fr, [1, 1],
                                  None, -5)

    def test_bad_call(self):
        self.assertRecordsNothing(TypeError, self.smp.record)
        self.assertRecordsNothing(TypeError, self.smp.record, [])
        self.assertRecordsNothing(TypeError, self.smp.record, [], [1], None, 0, 5)
        self.assertRecordsNothing(TypeError, self.smp.record, [], [1], nope=1)

    def test_record_while_a_sample_is_begun(self):
        self.smp.start()
        self.smp.push_frame("begun", "b.py", 1)
        with self.assertRaises(pprofkit.StateError):
            self.smp.record([("f", "f.py", 1)], [1, 1])
        # The begun sample is not touched: it flushes as it was.
        self.smp.set_value(1, 1)
        self.smp.flush()
        self.assertEqual(samples_of(self.rec), [([("begun", "b.py", 1)], {}, [0, 1])])


class RepairTest(Base):
    """Lone surrogates and invalid UTF-8 are repaired (U+FFFD), counted, never an error."""

    def test_surrogates_and_invalid_utf8(self):
        s = self.smp
        s.record([("f\ud800", "a\udfff.py", 1), (b"g\xff\xfe", b"b\xc3.py", 2)], [1, 1],
                 [("\udcffkey", "v\ud83d"), (b"bk\x80", b"bv\xe2\x82")])
        s.start()
        s.push_frame("\udc80", b"\xff", 3)
        s.push_label("\ud800", 1, "u\udc00")
        s.set_value(1, 1)
        s.flush()
        e = self.rec.export()
        p = support.decode(e.data)  # decode() fails on invalid UTF-8 in the output
        self.assertEqual(len(p.samples), 2)
        text = "".join(x for x in p.strings if x)
        self.assertIn("\ufffd", text)
        for st in p.strings:
            self.assertNotRegex(st, "[\ud800-\udfff]")
        frames = [f for stack, _, _ in p.samples for f in stack]
        self.assertIn(("f\ufffd\ufffd\ufffd", "a\ufffd\ufffd\ufffd.py", 1), frames)
        self.assertIn(("g\ufffd\ufffd", "b\ufffd.py", 2), frames)
        labels = p.samples[0][1]
        self.assertEqual(labels["\ufffd\ufffd\ufffdkey"], "v\ufffd\ufffd\ufffd")
        self.assertIn("bk\ufffd", labels)
        self.assertGreaterEqual(e.stats["strings_utf8_repaired"], 9)
        self.assertEqual(self.rec.stats()["strings_utf8_repaired"],
                         e.stats["strings_utf8_repaired"])

    def test_endpoint_repaired(self):
        self.rec.set_endpoint(5, "GET \ud800")
        self.rec.add_endpoint_count(b"\xff/x", 2)
        self.smp.record([("f", "", 0)], [1, 1], {"local root span id": 5})
        e = self.rec.export()
        (_, labels, _), = support.decode(e.data).samples
        self.assertEqual(labels["trace endpoint"], "GET \ufffd\ufffd\ufffd")
        self.assertGreaterEqual(e.stats["strings_utf8_repaired"], 1)

    def test_config_strings_repaired(self):
        # Sample types are repaired like every string (one rule, pprofkit.h).
        rec = pprofkit.Recorder([("cpu\ud800", "ns")], period_type=("x", "\udfff"))
        pprofkit.Sample(rec).record([("f", "", 0)], [1])
        e = rec.export()
        p = support.decode(e.data)
        self.assertEqual(p.sample_types, [("cpu\ufffd\ufffd\ufffd", "ns")])
        self.assertEqual(e.stats["strings_utf8_repaired"], 2)
        rec.close()


class NumbersTest(Base):
    def test_negative_values_are_summed(self):
        fr = [("f", "f.py", 1)]
        self.smp.record(fr, [-5, 1])
        self.smp.record(fr, [3, -4])
        self.smp.record(fr, [-(2 ** 63), 0])
        self.smp.record([("g", "g.py", 1)], [-7, -(2 ** 63)])
        p = support.decode(self.rec.export().data)
        got = {stack[0][0]: values for stack, _, values in p.samples}
        self.assertEqual(got["f"], [-(2 ** 63), -3])  # saturated at INT64_MIN
        self.assertEqual(got["g"], [-7, -(2 ** 63)])

    def test_extreme_ints_accepted(self):
        self.smp.record([("f", "f.py", 2 ** 63 - 1)], [2 ** 63 - 1, -(2 ** 63)],
                        {"n": -(2 ** 63), "m": 2 ** 63 - 1}, 2 ** 63 - 1)
        (stack, labels, values), = samples_of(self.rec)
        self.assertEqual(stack, [("f", "f.py", 2 ** 63 - 1)])
        self.assertEqual(values, [2 ** 63 - 1, -(2 ** 63)])
        self.assertEqual((labels["n"], labels["m"]), (-(2 ** 63), 2 ** 63 - 1))

    def test_index_objects(self):
        class I:
            def __init__(self, v):
                self.v = v

            def __index__(self):
                return self.v
        self.smp.record([("f", "f.py", I(4))], [I(2), I(1)], None, I(0))
        self.assertEqual(samples_of(self.rec), [([("f", "f.py", 4)], {}, [2, 1])])

    def test_bad_index_results(self):
        class Bad:
            def __index__(self):
                return "no"

        class Raises:
            def __index__(self):
                raise KeyError("from __index__")
        fr = [("f", "f.py", 1)]
        self.assertRecordsNothing(TypeError, self.smp.record, fr, [Bad(), 1])
        self.assertRecordsNothing(KeyError, self.smp.record, fr, [Raises(), 1])
        self.assertRecordsNothing(KeyError, self.smp.record, [("f", "f.py", Raises())], [1, 1])


class OrderTest(Base):
    def test_calls_out_of_order(self):
        s = self.smp
        for call, args in [(s.push_frame, ("f",)), (s.push_label, ("k", "v")),
                           (s.set_value, (0, 1)), (s.set_values, ([1],)),
                           (s.set_timestamp, (5,)), (s.flush, ()), (s.drop, ())]:
            with self.assertRaises(pprofkit.StateError, msg=call.__name__) as cm:
                call(*args)
            self.assertEqual(cm.exception.code, _native.PPK_ESTATE)
        s.start()
        with self.assertRaises(pprofkit.StateError):
            s.start()
        s.set_value(1, 1)
        s.flush()
        with self.assertRaises(pprofkit.StateError):
            s.flush()
        with self.assertRaises(pprofkit.StateError):
            s.drop()
        s.start()
        s.drop()
        with self.assertRaises(pprofkit.StateError):
            s.drop()
        self.assertEqual(samples_of(self.rec), [([], {}, [0, 1])])
        self.assertEqual(self.rec.stats()["samples_flushed"], 1)


class ClosedTest(unittest.TestCase):
    def test_closed_recorder(self):
        rec = pprofkit.Recorder(TYPES)
        smp = pprofkit.Sample(rec)
        smp.start()
        smp.push_frame("f")
        self.assertFalse(rec.closed)
        rec.close()
        self.assertTrue(rec.closed)
        rec.close()  # idempotent
        C = pprofkit.ClosedError
        for call, args in [(rec.export, ()), (rec.stats, ()), (rec.start, ()),
                           (rec.stop, ()), (rec.export_to_sinks, ()),
                           (rec.set_endpoint, (1, "x")), (rec.add_endpoint_count, ("x",)),
                           (rec.add_file_sink, (tempfile.gettempdir(),)),
                           (rec.__enter__, ()), (pprofkit.Sample, (rec,)),
                           (smp.push_frame, ("g",)), (smp.flush, ()), (smp.start, ()),
                           (smp.record, ([("f",)], [1, 1]))]:
            with self.assertRaises(C, msg=getattr(call, "__name__", call)) as cm:
                call(*args)
            self.assertEqual(cm.exception.code, _native.PPK_ECLOSED)
        self.assertEqual(rec.sample_types, tuple(TYPES))
        self.assertEqual(rec.codec, "gzip")
        self.assertIs(smp.recorder, rec)
        smp.close()
        smp.close()

    def test_closed_sample(self):
        with pprofkit.Recorder(TYPES) as rec:
            smp = pprofkit.Sample(rec)
            smp.start()
            smp.push_frame("unfinished")
            smp.close()  # the unfinished sample is dropped
            for call, args in [(smp.start, ()), (smp.push_frame, ("f",)),
                               (smp.push_label, ("k", 1)), (smp.set_value, (0, 1)),
                               (smp.set_values, ([1],)), (smp.set_timestamp, (1,)),
                               (smp.flush, ()), (smp.drop, ()),
                               (smp.record, ([("f",)], [1, 1]))]:
                with self.assertRaises(pprofkit.ClosedError, msg=call.__name__):
                    call(*args)
            smp.close()
            with smp:
                pass
            self.assertEqual(samples_of(rec), [])
            self.assertEqual(rec.stats()["samples_flushed"], 0)

    def test_sample_of_wrong_type(self):
        for bad in (None, 1, "rec", object()):
            with self.assertRaises(TypeError):
                pprofkit.Sample(bad)
        with self.assertRaises(TypeError):
            pprofkit.Sample()


class ConstructorTest(unittest.TestCase):
    def bad(self, exc, *args, **kwargs):
        with self.assertRaises(exc, msg="%r %r" % (args, kwargs)):
            pprofkit.Recorder(*args, **kwargs)

    def test_sample_types(self):
        self.bad(ValueError, [])
        self.bad(ValueError, [pprofkit.SAMPLES] * 17)
        self.bad(TypeError, None)
        self.bad(TypeError, 5)
        self.bad(TypeError, "samples")
        self.bad(TypeError, [("samples",)])
        self.bad(TypeError, [("a", "b", "c")])
        self.bad(TypeError, [("a", 1)])
        self.bad(TypeError, [(b"a", b"b")])
        self.bad(TypeError, ["ab"])
        self.bad(TypeError, [None])
        self.bad(TypeError)
        for n in (1, 16):
            with pprofkit.Recorder([("t%d" % i, "count") for i in range(n)]) as rec:
                self.assertEqual(len(rec.sample_types), n)
        self.bad(TypeError, iter([("a", "b")]))  # a sequence, not any iterable
        with pprofkit.Recorder([["a", "b"]]) as rec:  # pairs may be any sequence
            self.assertEqual(rec.sample_types, (("a", "b"),))

    def test_options(self):
        self.bad(ValueError, TYPES, codec="lz4")
        self.bad(ValueError, TYPES, codec=1)
        self.bad(ValueError, TYPES, codec=b"gzip")
        self.bad(ValueError, TYPES, memory_limit=-1)
        self.bad(OverflowError, TYPES, memory_limit=2 ** 64)
        self.bad(TypeError, TYPES, memory_limit=1.0)
        self.bad(pprofkit.InvalidArgumentError, TYPES, memory_limit=1)
        self.bad(pprofkit.InvalidArgumentError, TYPES, max_frames=1)
        self.bad(pprofkit.InvalidArgumentError, TYPES, shards=65)
        self.bad(TypeError, TYPES, period="10")
        self.bad(OverflowError, TYPES, period=2 ** 63)
        self.bad(TypeError, TYPES, period_type="wall")
        self.bad(TypeError, TYPES, period_type=("wall",))
        self.bad(ValueError, TYPES, level=10 ** 6)
        self.bad(TypeError, TYPES, out_dir=5)
        self.bad(TypeError, TYPES, name=["x"])
        self.bad(TypeError, TYPES, nope=1)
        self.bad(TypeError, TYPES, pprofkit.SAMPLES)  # options are keyword-only
        with pprofkit.Recorder(TYPES, codec=None, memory_limit=None, out_dir=None) as rec:
            self.assertEqual(rec.codec, "gzip")

    def test_add_file_sink_errors(self):
        with pprofkit.Recorder(TYPES) as rec:
            with self.assertRaises(TypeError):
                rec.add_file_sink(None)
            with self.assertRaises(TypeError):
                rec.add_file_sink(5)
            with self.assertRaises(TypeError):
                rec.add_file_sink(tempfile.gettempdir(), 5)

    def test_seventeenth_sink_refused(self):
        with tempfile.TemporaryDirectory() as d, pprofkit.Recorder(TYPES) as rec:
            for _ in range(16):
                rec.add_file_sink(d)
            with self.assertRaises(pprofkit.Error) as cm:
                rec.add_file_sink(d)
            self.assertEqual(cm.exception.code, _native.PPK_EFULL)
            self.assertIn("(at most 16 sinks per recorder)", str(cm.exception))

    def test_endpoint_errors(self):
        with pprofkit.Recorder(TYPES) as rec:
            with self.assertRaises(pprofkit.InvalidArgumentError):
                rec.set_endpoint(0, "GET /")
            with self.assertRaises(ValueError):
                rec.set_endpoint(-1, "GET /")
            with self.assertRaises(OverflowError):
                rec.set_endpoint(2 ** 64, "GET /")
            with self.assertRaises(TypeError):
                rec.set_endpoint(1, None)
            with self.assertRaises(TypeError):
                rec.set_endpoint(1.0, "GET /")
            with self.assertRaises(pprofkit.InvalidArgumentError):
                rec.add_endpoint_count("GET /", -1)
            with self.assertRaises(TypeError):
                rec.add_endpoint_count(None)
            with self.assertRaises(TypeError):
                rec.add_endpoint_count("GET /", 1.0)
            self.assertEqual(rec.export().stats["endpoints"], 0)


# ---- Re-entrancy ------------------------------------------------------------------------


class Hook:
    """An int-like (__index__) and iterable (__iter__) object that runs `action` once,
    when first converted, then behaves as `value` / iterates over `items`."""

    def __init__(self, action, value=1, items=("k", "v")):
        self.action, self.value, self.items = action, value, items
        self.errors = []

    def run(self):
        action, self.action = self.action, None
        if action:
            try:
                action()
            except Exception as e:  # what the nested call raised, for the test to see
                self.errors.append(e)

    def __index__(self):
        self.run()
        return self.value

    def __iter__(self):
        self.run()
        return iter(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class OtherThread:
    """Runs `action` in another thread while the caller's conversion waits inside
    __index__ / __iter__ (with the GIL released): returns a Hook for that."""

    def __init__(self, test, action, **kw):
        self.test = test
        self.go, self.done = threading.Event(), threading.Event()
        self.errors = []

        def body():
            self.go.wait(30)
            try:
                action()
            except Exception as e:
                self.errors.append(e)
            finally:
                self.done.set()
        self.thread = threading.Thread(target=body)
        self.thread.start()
        self.hook = Hook(self.wait, **kw)

    def wait(self):
        self.go.set()
        self.test.assertTrue(self.done.wait(30), "the other thread did not finish")

    def join(self):
        self.go.set()
        self.thread.join(30)
        self.test.assertFalse(self.thread.is_alive())


class ReentrancyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.rec = pprofkit.Recorder(TYPES, out_dir=self.tmp.name)
        self.smp = pprofkit.Sample(self.rec)

    def tearDown(self):
        self.smp.close()
        self.rec.close()
        self.tmp.cleanup()

    def files(self):
        return [os.path.join(self.tmp.name, f) for f in sorted(os.listdir(self.tmp.name))]

    def recorded_after_close(self):
        """The rec was closed: the samples of the file its close wrote."""
        files = self.files()
        self.assertEqual(len(files), 1)
        with open(files[0], "rb") as f:
            return support.decode(f.read()).samples

    def spots(self, hook):
        """record() calls that meet `hook` at each place where Python code can run:
        values, a frame's line, the frames' iterator, a frame sequence, a label pair."""
        return [
            lambda: self.smp.record([("f", "f.py", 1)], [hook, 1]),
            lambda: self.smp.record([("f", "f.py", 1), ("g", "g.py", hook)], [1, 1]),
            lambda: self.smp.record(Hook(hook.run, items=[("f", "f.py", 1)]), [1, 1]),
            lambda: self.smp.record([("f", "f.py", 1), Hook(hook.run, items=("g",))],
                                    [1, 1]),
            lambda: self.smp.record([("f", "f.py", 1)], [1, 1], [("a", "b"), hook]),
        ]

    def test_sample_closed_from_the_same_thread(self):
        for i in range(5):
            with self.subTest(spot=i):
                smp = pprofkit.Sample(self.rec)
                hook = Hook(smp.close)
                self.smp, old = smp, self.smp  # the spots' lambdas read self.smp
                try:
                    with self.assertRaises(pprofkit.ClosedError):
                        self.spots(hook)[i]()
                    with self.assertRaises(pprofkit.ClosedError):
                        smp.start()
                finally:
                    self.smp = old
                    smp.close()
        self.assertEqual(samples_of(self.rec), [])

    def test_recorder_closed_from_the_same_thread(self):
        for i in range(5):
            with self.subTest(spot=i):
                tmp = tempfile.TemporaryDirectory()
                rec = pprofkit.Recorder(TYPES, out_dir=tmp.name)
                smp = pprofkit.Sample(rec)
                smp.record([("before", "b.py", 1)], [1, 1])
                hook = Hook(rec.close)
                old = self.smp
                self.smp = smp
                try:
                    with self.assertRaises(pprofkit.ClosedError):
                        self.spots(hook)[i]()
                    self.assertTrue(rec.closed)
                    with self.assertRaises(pprofkit.ClosedError):
                        smp.record([("after", "a.py", 1)], [1, 1])
                finally:
                    self.smp = old
                    smp.close()
                    rec.close()
                (name,) = os.listdir(tmp.name)
                with open(os.path.join(tmp.name, name), "rb") as f:
                    got = support.decode(f.read()).samples
                self.assertEqual(got, [([("before", "b.py", 1)], {}, [1, 1])])
                tmp.cleanup()

    def test_same_sample_used_from_the_same_thread(self):
        fr = [("inner", "i.py", 1)]
        nested = [
            lambda: self.smp.record(fr, [10, 1]),   # StateError: a sample is begun
            lambda: self.smp.start(),               # StateError
            self.smp.flush,                         # flushes the half-built sample
            self.smp.drop,                          # drops it
            lambda: (self.smp.drop(), self.smp.record(fr, [10, 1])),
            lambda: (self.smp.drop(), self.smp.start()),
        ]
        for n, action in enumerate(nested):
            for i in range(5):
                with self.subTest(nested=n, spot=i):
                    hook = Hook(action)
                    try:
                        self.spots(hook)[i]()
                    except pprofkit.Error:
                        pass
                    # Whatever happened, the builder is usable and the export decodes.
                    try:
                        self.smp.drop()
                    except pprofkit.StateError:
                        pass
                    self.smp.record([("ok", "ok.py", 1)], [1, 1])
                    got = samples_of(self.rec)
                    self.assertIn(([("ok", "ok.py", 1)], {}, [1, 1]), got)
                    flushed = sum(v[1] for _, _, v in got)
                    self.assertLessEqual(flushed, 3)

    def test_lists_changed_during_the_call(self):
        fr = []
        vals = []
        labels = []
        fr[:] = [("f", "f.py", Hook(fr.clear)), ("g", "g.py", 2), ("h", "h.py", 3)]
        with self.assertRaises(RuntimeError):
            self.smp.record(fr, [1, 1])
        vals[:] = [Hook(vals.clear), 1]
        with self.assertRaises(RuntimeError):
            self.smp.record([("f",)], vals)
        vals[:] = [Hook(lambda: vals.append(5)), 1]  # growing is harmless
        self.smp.record([("grown",)], vals)
        labels[:] = [Hook(labels.clear), ("a", "b"), ("c", "d")]
        with self.assertRaises(RuntimeError):
            self.smp.record([("f",)], [1, 1], labels)
        fr[:] = [Hook(fr.clear, items=("x", "x.py", 1)), ("g", "g.py", 2)]
        with self.assertRaises(RuntimeError):
            self.smp.record(fr, [1, 1])
        with self.assertRaises(RuntimeError):
            self.smp.set_values(_shrinking_values())
        self.assertEqual(samples_of(self.rec), [([("grown", "", 0)], {}, [1, 1])])
        types = []
        types[:] = [Hook(types.clear, items=("a", "b")), ("c", "d"), ("e", "f")]
        with pprofkit.Recorder(types) as rec:
            self.assertEqual(rec.sample_types, (("a", "b"), ("c", "d"), ("e", "f")))

    def test_endpoint_calls_closing_the_recorder(self):
        rec = pprofkit.Recorder(TYPES)
        with self.assertRaises(pprofkit.ClosedError):
            rec.set_endpoint(Hook(rec.close, value=5), "GET /")
        rec = pprofkit.Recorder(TYPES)
        with self.assertRaises(pprofkit.ClosedError):
            rec.add_endpoint_count("GET /", Hook(rec.close, value=5))
        rec = pprofkit.Recorder(TYPES)
        smp = pprofkit.Sample(rec)
        smp.start()
        with self.assertRaises(pprofkit.ClosedError):
            smp.set_value(Hook(smp.close, value=0), 5)
        with self.assertRaises(pprofkit.ClosedError):
            pprofkit.Sample(rec).set_timestamp(Hook(rec.close, value=5))
        rec.close()

    def test_sample_closed_from_another_thread(self):
        for i in range(5):
            with self.subTest(spot=i):
                smp = pprofkit.Sample(self.rec)
                other = OtherThread(self, smp.close)
                old, self.smp = self.smp, smp
                try:
                    with self.assertRaises(pprofkit.ClosedError):
                        self.spots(other.hook)[i]()
                finally:
                    self.smp = old
                    other.join()
                self.assertEqual(other.errors, [])
                with self.assertRaises(pprofkit.ClosedError):
                    smp.start()
        self.assertEqual(samples_of(self.rec), [])

    def test_recorder_closed_from_another_thread(self):
        for i in range(5):
            with self.subTest(spot=i):
                tmp = tempfile.TemporaryDirectory()
                rec = pprofkit.Recorder(TYPES, out_dir=tmp.name)
                smp = pprofkit.Sample(rec)
                smp.record([("before", "b.py", 1)], [1, 1])
                other = OtherThread(self, rec.close)
                old, self.smp = self.smp, smp
                try:
                    with self.assertRaises(pprofkit.ClosedError):
                        self.spots(other.hook)[i]()
                finally:
                    self.smp = old
                    other.join()
                    smp.close()
                self.assertEqual(other.errors, [])
                self.assertTrue(rec.closed)
                (name,) = os.listdir(tmp.name)
                with open(os.path.join(tmp.name, name), "rb") as f:
                    got = support.decode(f.read()).samples
                self.assertEqual(got, [([("before", "b.py", 1)], {}, [1, 1])])
                tmp.cleanup()

    def test_same_sample_used_from_another_thread(self):
        fr = [("other", "o.py", 1)]
        actions = [
            lambda: self.smp.record(fr, [10, 1]),
            self.smp.flush,
            self.smp.drop,
            lambda: (self.smp.drop(), self.smp.record(fr, [10, 1])),
            lambda: (self.smp.drop(), self.smp.start(), self.smp.push_frame("x")),
        ]
        for n, action in enumerate(actions):
            for i in range(5):
                with self.subTest(action=n, spot=i):
                    other = OtherThread(self, action)
                    try:
                        self.spots(other.hook)[i]()
                    except pprofkit.Error:
                        pass
                    finally:
                        other.join()
                    for e in other.errors:
                        self.assertIsInstance(e, pprofkit.Error)
                    try:
                        self.smp.drop()
                    except pprofkit.StateError:
                        pass
                    self.smp.record([("ok", "ok.py", 1)], [1, 1])
                    got = samples_of(self.rec)
                    self.assertIn(([("ok", "ok.py", 1)], {}, [1, 1]), got)

    def test_one_sample_hammered_by_four_threads(self):
        rec = pprofkit.Recorder(TYPES)
        smp = pprofkit.Sample(rec)
        flushed = [0] * 4
        unexpected = []

        def body(t):
            fr = [("t%d" % t, "h.py", t)]
            for i in range(1500):
                try:
                    k = i % 5
                    if k == 0:
                        smp.record(fr, [1, 1], {"t": t})
                        flushed[t] += 1
                    elif k == 1:
                        smp.start()
                    elif k == 2:
                        smp.push_frame("p%d" % t, "h.py", i)
                        smp.push_label("k%d" % (i % 7), i)
                    elif k == 3:
                        smp.set_value(1, 1)
                        smp.flush()
                        flushed[t] += 1
                    else:
                        smp.drop()
                except pprofkit.InvalidArgumentError:
                    pass  # a duplicate label of another thread's pushes
                except pprofkit.StateError:
                    pass
                except BaseException as e:
                    unexpected.append(e)
        threads = [threading.Thread(target=body, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        try:
            self.assertEqual(unexpected, [])
            self.assertGreater(sum(flushed), 0)
            e = rec.export()
            p = support.decode(e.data)
            # Every successful flush or record is one sample of value 1, no more, no less.
            self.assertEqual(p.total("samples"), sum(flushed))
            self.assertEqual(rec.stats()["samples_flushed"], sum(flushed))
        finally:
            smp.close()
            rec.close()


def _shrinking_values():
    vals = []
    vals[:] = [1, Hook(vals.clear), 1]
    return vals


if __name__ == "__main__":
    unittest.main()
