"""test_api.py - the API of pprofkit._native, checked on what it exports.

Every profile is read back by readers independent of pprofkit (support.py): protoc
against Debian's profile.proto (support.decode, support.parse_text for fields decode()
leaves out, such as label units) and `go tool pprof -top` (support.go_top). Covered:
values per sample type, aggregation, labels of every kind, bytes arguments, timestamps,
endpoints, every codec, the Export fields, stats(), the attributes, context managers,
file sinks, max_frames, the memory limit, and every shape record() accepts.
"""

import gzip
import os
import re
import tempfile
import unittest

import pprofkit

import support

TYPES = [pprofkit.CPU_TIME, pprofkit.SAMPLES]


def raw_labels(data):
    """Each sample's labels as protoc prints them, with string ids resolved:
    [{key: (str or num, num_unit)}]."""
    msg = support.parse_text(support.protoc_text(data))
    st = msg["string_table"]
    out = []
    for smp in msg.get("sample", []):
        labels = {}
        for lb in smp.get("label", []):
            key = st[lb["key"][0]]
            if "str" in lb:
                labels[key] = (st[lb["str"][0]], None)
            else:
                unit = lb.get("num_unit", [0])[0]
                labels[key] = (lb.get("num", [0])[0], st[unit] if unit else None)
        out.append(labels)
    return out


def canon(samples):
    """Samples in a canonical order (labels as sorted items), to compare as lists."""
    return sorted((stack, sorted(labels.items(), key=repr), values)
                  for stack, labels, values in samples)


def read(path):
    with open(path, "rb") as f:
        return f.read()


class RecorderCase(unittest.TestCase):
    types = TYPES
    options = {}

    def setUp(self):
        self.rec = pprofkit.Recorder(self.types, **self.options)
        self.smp = pprofkit.Sample(self.rec)

    def tearDown(self):
        self.smp.close()
        self.rec.close()

    def export(self):
        e = self.rec.export()
        return e, support.decode(e.data)


class RoundTripTest(RecorderCase):
    types = [pprofkit.CPU_TIME, pprofkit.WALL_TIME, pprofkit.SAMPLES, ("alloc-space", "bytes")]
    options = {"period": 10_000_000, "period_type": pprofkit.WALL_TIME}

    def test_values_per_sample_type(self):
        s = self.smp
        s.start()
        s.push_frame("leaf", "m.py", 10)
        s.push_frame("main", "m.py", 2)
        s.set_value(0, 1000)
        s.set_value(3, 4096)
        s.set_value(2, 1)
        s.flush()
        s.record([("other", "o.py", 7)], [5, 6, 7, 8])
        e, p = self.export()
        self.assertEqual(p.sample_types, [tuple(t) for t in self.types])
        self.assertEqual(p.period, 10_000_000)
        self.assertEqual(sorted(p.samples), sorted([
            ([("leaf", "m.py", 10), ("main", "m.py", 2)], {}, [1000, 0, 1, 4096]),
            ([("other", "o.py", 7)], {}, [5, 6, 7, 8]),
        ]))
        for name, total in [("cpu-time", 1005), ("wall-time", 6), ("samples", 8),
                            ("alloc-space", 4104)]:
            self.assertEqual(p.total(name), total)
        flat, _ = support.go_top(e.data, "samples")
        self.assertEqual(flat, {"leaf": 1, "other": 7, "main": 0})
        flat, _ = support.go_top(e.data, "cpu-time")
        self.assertEqual(flat["leaf"], 1000)
        self.assertEqual(flat["other"], 5)

    def test_set_values_sets_the_first_n(self):
        s = self.smp
        s.start()
        s.set_values([1, 2])
        s.set_value(3, 9)
        s.flush()
        _, p = self.export()
        self.assertEqual(p.samples, [([], {}, [1, 2, 0, 9])])

    def test_record_with_fewer_values(self):
        self.smp.record([("f",)], [3])
        _, p = self.export()
        self.assertEqual(p.samples, [([("f", "", 0)], {}, [3, 0, 0, 0])])


class AggregationTest(RecorderCase):
    def test_equal_stacks_and_labels_aggregate(self):
        fr = [("leaf", "a.py", 1), ("root", "a.py", 9)]
        for _ in range(10):
            self.smp.record(fr, [100, 1], {"thread": "main", "id": 7})
        self.smp.record(fr, [5, 1], [("id", 7), ("thread", "main")])  # any order
        self.smp.record(fr, [1, 1], {"thread": "other", "id": 7})      # other labels
        self.smp.record(fr[1:], [2, 1], {"thread": "main", "id": 7})   # other stack
        self.smp.record(fr, [3, 1], {"thread": "main", "id": 7, "x": "y"})
        e, p = self.export()
        self.assertEqual(canon(p.samples), canon([
            (fr, {"thread": "main", "id": 7}, [1005, 11]),
            (fr, {"thread": "other", "id": 7}, [1, 1]),
            (fr[1:], {"thread": "main", "id": 7}, [2, 1]),
            (fr, {"thread": "main", "id": 7, "x": "y"}, [3, 1]),
        ]))
        self.assertEqual(e.stats["samples_added"], 14)
        self.assertEqual(e.stats["samples_aggregated"], 4)
        flat, _ = support.go_top(e.data, "samples")
        self.assertEqual(flat, {"leaf": 13, "root": 1})

    def test_frames_differing_by_file_or_line(self):
        self.smp.record([("f", "a.py", 1)], [1, 1])
        self.smp.record([("f", "a.py", 2)], [1, 1])
        self.smp.record([("f", "b.py", 1)], [1, 1])
        _, p = self.export()
        self.assertEqual(len(p.samples), 3)
        self.assertEqual({s[0][0] for s in p.samples},
                         {("f", "a.py", 1), ("f", "a.py", 2), ("f", "b.py", 1)})


class LabelsTest(RecorderCase):
    def test_str_and_numeric_labels_with_units(self):
        s = self.smp
        s.start()
        s.push_label("thread name", "worker-1")
        s.push_label("thread id", 140234)
        s.push_label("allocation", 4096, "bytes")
        s.push_label("neg", -3)
        s.push_label("none unit", 5, None)
        s.set_value(1, 1)
        s.flush()
        e, p = self.export()
        self.assertEqual(p.samples[0][1], {"thread name": "worker-1", "thread id": 140234,
                                           "allocation": 4096, "neg": -3, "none unit": 5})
        self.assertEqual(raw_labels(e.data), [{
            "thread name": ("worker-1", None), "thread id": (140234, None),
            "allocation": (4096, "bytes"), "neg": (-3, None), "none unit": (5, None)}])

    def test_units_distinguish_labels(self):
        self.smp.record([("f",)], [1, 1], [("n", 1, "bytes")])
        self.smp.record([("f",)], [1, 1], [("n", 1, "count")])
        self.smp.record([("f",)], [1, 1], [("n", 1, "bytes")])
        e, _ = self.export()
        got = sorted((lb["n"][1], lb["n"][0]) for lb in raw_labels(e.data))
        self.assertEqual(got, [("bytes", 1), ("count", 1)])

    def test_bytes_arguments(self):
        s = self.smp
        s.start()
        s.push_frame(b"bfunc", b"b.py", 3)
        s.push_frame("sfunc", b"s.py")
        s.push_frame(b"nofile")
        s.push_label(b"bkey", b"bval")
        s.push_label(b"bnum", 9, b"ms")
        s.set_value(1, 1)
        s.flush()
        s.record([(b"rf", b"r.py", 4)], [1, 1], {b"rk": b"rv"})
        e, p = self.export()
        self.assertIn(([("bfunc", "b.py", 3), ("sfunc", "s.py", 0), ("nofile", "", 0)],
                       {"bkey": "bval", "bnum": 9}, [0, 1]), p.samples)
        self.assertIn(([("rf", "r.py", 4)], {"rk": "rv"}, [1, 1]), p.samples)
        self.assertIn({"bkey": ("bval", None), "bnum": (9, "ms")}, raw_labels(e.data))

    def test_str_and_bytes_keys_are_the_same_label(self):
        self.smp.record([("f",)], [1, 1], {"k": "v"})
        self.smp.record([("f",)], [1, 1], {b"k": b"v"})
        _, p = self.export()
        self.assertEqual(p.samples, [([("f", "", 0)], {"k": "v"}, [2, 2])])

    def test_non_ascii(self):
        self.smp.record([("fünf", "päth/ü.py", 1)], [1, 1], {"clé": "värde ☃"})
        _, p = self.export()
        self.assertEqual(p.samples, [([("fünf", "päth/ü.py", 1)], {"clé": "värde ☃"},
                                      [1, 1])])


class RecordShapesTest(RecorderCase):
    def test_frame_tuples_of_one_two_three(self):
        self.smp.record([("one",), ("two", "t.py"), ("three", "h.py", 3),
                         ["list", "l.py", 4], ("nofile", None, 5), ("noline", "n.py", None)],
                        [1, 1])
        _, p = self.export()
        self.assertEqual(p.samples[0][0], [("one", "", 0), ("two", "t.py", 0),
                                           ("three", "h.py", 3), ("list", "l.py", 4),
                                           ("nofile", "", 5), ("noline", "n.py", 0)])

    def test_frames_as_tuple_or_generator_values_as_tuple(self):
        self.smp.record((("a", "a.py", 1),), (2, 1))
        self.smp.record((f for f in [("a", "a.py", 1)]), iter([3, 1]))
        self.smp.record([], [4, 1])  # an empty stack
        _, p = self.export()
        self.assertEqual(sorted(p.samples), sorted([([("a", "a.py", 1)], {}, [5, 2]),
                                                    ([], {}, [4, 1])]))

    def test_labels_as_dict_pairs_and_triples(self):
        fr = [("f", "f.py", 1)]
        self.smp.record(fr, [1, 1], {"d": "x", "n": 2})
        self.smp.record(fr, [1, 1], [("p", "x"), ["q", 3]])
        self.smp.record(fr, [1, 1], [("mem", 64, "bytes"), ("s", "v", None)])
        self.smp.record(fr, [1, 1], None)
        self.smp.record(fr, [1, 1], [])
        self.smp.record(fr, [1, 1], {})
        self.smp.record(fr, [1, 1], labels=(("t", "u"),), timestamp_ns=None)
        e, p = self.export()
        self.assertEqual(canon(p.samples), canon([
            (fr, {"d": "x", "n": 2}, [1, 1]),
            (fr, {"p": "x", "q": 3}, [1, 1]),
            (fr, {"mem": 64, "s": "v"}, [1, 1]),
            (fr, {}, [3, 3]),
            (fr, {"t": "u"}, [1, 1]),
        ]))
        self.assertIn({"mem": (64, "bytes"), "s": ("v", None)}, raw_labels(e.data))

    def test_keywords(self):
        self.smp.record(frames=[("k",)], values=[1, 1], labels={"a": "b"}, timestamp_ns=0)
        _, p = self.export()
        self.assertEqual(p.samples, [([("k", "", 0)], {"a": "b"}, [1, 1])])


class TimestampTest(RecorderCase):
    def test_timestamped_samples_stay_separate(self):
        fr = [("f", "f.py", 1)]
        s = self.smp
        now = pprofkit.now_ns()
        for i in range(3):
            s.start()
            s.push_frame("f", "f.py", 1)
            s.set_value(1, 1)
            s.set_timestamp(now + i)
            s.flush()
        s.record(fr, [0, 1], timestamp_ns=now + 10)
        s.record(fr, [0, 1], {"k": "v"}, now + 10)
        s.record(fr, [0, 1])   # not timestamped: aggregated
        s.record(fr, [0, 1], timestamp_ns=0)
        s.start()
        s.set_timestamp(now + 99)
        s.set_timestamp(0)     # undone
        s.push_frame("f", "f.py", 1)
        s.set_value(1, 1)
        s.flush()
        e, p = self.export()
        got = sorted(((lb.get("end_timestamp_ns", 0), lb.get("k", ""), v[1])
                      for _, lb, v in p.samples))
        self.assertEqual(got, sorted([(now, "", 1), (now + 1, "", 1), (now + 2, "", 1),
                                      (now + 10, "", 1), (now + 10, "v", 1), (0, "", 3)]))
        self.assertEqual(sum("end_timestamp_ns" in lb for _, lb, _ in p.samples), 5)
        self.assertEqual(e.stats["samples_timestamped"], 5)
        self.assertEqual(p.total("samples"), 8)
        self.assertTrue(all(stack == fr for stack, _, _ in p.samples))


class EndpointTest(RecorderCase):
    def test_trace_endpoint_label(self):
        r = self.rec
        r.set_endpoint(42, "GET /x")
        r.set_endpoint(local_root_span_id=43, endpoint=b"POST /y")
        r.set_endpoint(44, "old")
        r.set_endpoint(44, "PUT /z")  # replaces
        fr = [("handler", "h.py", 1)]
        self.smp.record(fr, [1, 1], {"local root span id": 42})
        self.smp.record(fr, [1, 1], {"local root span id": 43})
        self.smp.record(fr, [1, 1], {"local root span id": 44})
        self.smp.record(fr, [1, 1], {"local root span id": 45})  # no endpoint
        self.smp.record(fr, [1, 1], {"local root span id": 42, "trace endpoint": "mine"})
        r.add_endpoint_count("GET /x")
        r.add_endpoint_count("GET /x", 4)
        r.add_endpoint_count(endpoint=b"POST /y", count=2)
        e, p = self.export()
        got = sorted((lb["local root span id"], lb.get("trace endpoint"))
                     for _, lb, _ in p.samples)
        self.assertEqual(got, [(42, "GET /x"), (42, "mine"), (43, "POST /y"),
                               (44, "PUT /z"), (45, None)])
        self.assertEqual(e.stats["endpoints"], 3)
        self.assertEqual(list(e.endpoint_counts.items()), [("GET /x", 5), ("POST /y", 2)])
        # Registrations are the recorder's: a span's samples in the next window are
        # labelled too. Endpoint counts belong to the window: the next one has none.
        self.smp.record(fr, [1, 1], {"local root span id": 42})
        e, p = self.export()
        self.assertEqual(p.samples[0][1], {"local root span id": 42, "trace endpoint": "GET /x"})
        self.assertEqual(e.stats["endpoints"], 1)  # a window holds those its samples carry
        self.assertEqual(e.endpoint_counts, {})
        self.assertEqual(r.stats()["endpoints"], 3)  # the recorder keeps all three


class CodecTest(unittest.TestCase):
    def roundtrip(self, codec, magic):
        with pprofkit.Recorder(TYPES, codec=codec) as rec:
            self.assertEqual(rec.codec, codec or "gzip")
            with pprofkit.Sample(rec) as smp:
                smp.record([("f", "f.py", 1)], [7, 1], {"k": "v"})
            e = rec.export()
        self.assertEqual(e.codec, codec or "gzip")
        self.assertTrue(e.data.startswith(magic), e.data[:8])
        p = support.decode(e.data)
        self.assertEqual(p.samples, [([("f", "f.py", 1)], {"k": "v"}, [7, 1])])
        return e

    def test_gzip(self):
        e = self.roundtrip("gzip", b"\x1f\x8b")
        gzip.decompress(e.data)
        self.assertEqual(support.go_top(e.data, "cpu-time")[0], {"f": 7})
        self.roundtrip(None, b"\x1f\x8b")

    def test_zstd(self):
        self.roundtrip("zstd", b"\x28\xb5\x2f\xfd")

    def test_none(self):
        e = self.roundtrip("none", b"")
        self.assertFalse(e.data.startswith(b"\x1f\x8b"))
        self.assertEqual(support.raw(e.data), e.data)

    def test_levels(self):
        with pprofkit.Recorder(TYPES, codec="gzip", level=9) as rec:
            pprofkit.Sample(rec).record([("f",)], [1, 1])
            self.assertEqual(support.decode(rec.export().data).total("samples"), 1)


class ExportTest(RecorderCase):
    def test_fields(self):
        before = pprofkit.now_ns()
        e1 = self.rec.export()
        self.smp.record([("f",)], [1, 1])
        self.smp.record([("g",)], [1, 1])
        e2 = self.rec.export()
        e3 = self.rec.export()
        after = pprofkit.now_ns()
        self.assertIsInstance(e1, pprofkit.Export)
        self.assertEqual([e.seq for e in (e1, e2, e3)], [1, 2, 3])
        for e in (e1, e2, e3):
            self.assertLessEqual(e.start_ns, e.end_ns)
            self.assertLessEqual(before - 10**9, e.start_ns)
            self.assertLessEqual(e.end_ns, after)
            self.assertIsInstance(e.data, bytes)
            self.assertEqual(e.codec, "gzip")
            self.assertIsInstance(e.encode_ms, float)
            self.assertGreaterEqual(e.encode_ms, 0.0)
            self.assertIsInstance(e.stats, dict)
        self.assertLessEqual(e1.end_ns, e2.start_ns)  # consecutive windows
        self.assertLessEqual(e2.end_ns, e3.start_ns)
        self.assertEqual(e1.stats["samples_added"], 0)
        self.assertEqual(e2.stats["samples_added"], 2)
        self.assertEqual(e2.stats["samples_aggregated"], 2)
        self.assertEqual(e2.stats["stacks"], 2)
        self.assertEqual(e2.stats["functions"], 2)
        self.assertEqual(e3.stats["samples_added"], 0)
        p = support.decode(e2.data)
        self.assertEqual(p.time_nanos, e2.start_ns)
        self.assertEqual(p.duration_nanos, e2.end_ns - e2.start_ns)
        self.assertEqual(support.decode(e1.data).samples, [])
        # A struct sequence: indexable, in the documented field order.
        self.assertEqual(e2[0], e2.data)
        self.assertEqual(e2[4], 2)
        self.assertEqual(len(e2), 8)
        self.assertEqual(e2[7], e2.endpoint_counts)

    def test_seal_then_last_window(self):
        # seal(): flushes are refused (and counted) from then on; export() takes the
        # last window with everything flushed before.
        self.smp.record([("f",)], [1, 1])
        self.rec.export()
        self.smp.record([("g",)], [1, 1])
        self.rec.seal()
        self.rec.seal()
        with self.assertRaises(pprofkit.ClosedError):
            self.smp.record([("h",)], [1, 1])
        with self.assertRaises(pprofkit.ClosedError):
            pprofkit.Sample(self.rec)
        last = support.decode(self.rec.export().data)
        self.assertEqual([leaf for leaf in (s[0][0][0] for s in last.samples)], ["g"])
        st = self.rec.stats()
        self.assertEqual(st["samples_flushed"], 2)
        self.assertEqual(st["samples_exported"], 2)
        self.assertEqual(st["samples_dropped_closed"], 1)

    def test_stats_dict_keys(self):
        e = self.rec.export()
        keys = {"samples_added", "samples_aggregated", "samples_timestamped", "strings",
                "string_bytes", "functions", "mappings", "locations", "stacks", "labels",
                "label_sets", "endpoints", "strings_utf8_repaired", "strings_truncated",
                "stacks_truncated", "values_saturated", "strings_dropped", "labels_dropped",
                "label_sets_dropped", "stacks_dropped", "samples_overflowed",
                "timestamps_dropped", "endpoints_dropped", "memory_bytes",
                "memory_peak_bytes", "memory_limit", "scratch_bytes"}
        self.assertEqual(set(e.stats), keys)
        self.assertEqual(e.stats["memory_limit"], 64 << 20)


class StatsTest(RecorderCase):
    options = {"max_string_len": 16}

    def test_keys_and_counts(self):
        st = self.rec.stats()
        keys = {"samples_flushed", "samples_exported", "windows_exported", "strings",
                "window_bytes", "window_bytes_peak", "export_ms_last", "export_ms_max",
                "export_ms_total", "strings_utf8_repaired", "strings_truncated",
                "stacks_truncated", "values_saturated", "strings_dropped", "labels_dropped",
                "label_sets_dropped", "stacks_dropped", "samples_overflowed",
                "timestamps_dropped", "endpoints_dropped", "samples_dropped_nomem",
                "samples_dropped_closed", "samples_lost_export", "export_failures",
                "sink_failures", "samples_lost_sink", "samples_dropped_no_sink", "functions", "function_bytes", "functions_evicted",
                "functions_refused", "samples_dropped_stale", "endpoints"}
        self.assertEqual(set(st), keys)
        self.assertTrue(all(v == 0 for k, v in st.items()
                            if k not in ("window_bytes", "window_bytes_peak", "strings")))
        for i in range(5):
            self.smp.record([("f%d" % i,)], [1, 1])
        self.smp.record([("x" * 40,)], [1, 1])               # truncated
        self.smp.record([("f",)], [2 ** 63 - 1, 1])
        self.smp.record([("f",)], [1, 1])                     # saturates
        st = self.rec.stats()
        self.assertEqual(st["samples_flushed"], 8)
        self.assertEqual(st["samples_exported"], 0)
        self.assertEqual(st["windows_exported"], 0)
        self.assertEqual(st["strings_truncated"], 1)
        self.assertEqual(st["values_saturated"], 1)
        self.assertGreater(st["strings"], 6)
        self.assertGreater(st["window_bytes"], 0)
        e = self.rec.export()
        p = support.decode(e.data)
        self.assertIn(("x" * 16, "", 0), [s[0][0] for s in p.samples])
        self.assertEqual(p.total("cpu-time"), 5 + 1 + 2 ** 63 - 1)
        st = self.rec.stats()
        self.assertEqual(st["samples_exported"], 8)
        self.assertEqual(st["windows_exported"], 1)
        self.assertEqual(st["strings_truncated"], 1)  # over the exported windows too
        self.assertGreaterEqual(st["export_ms_total"], st["export_ms_last"])
        self.assertGreaterEqual(st["window_bytes_peak"], st["window_bytes"])
        self.rec.export()
        self.assertEqual(self.rec.stats()["windows_exported"], 2)


class AttributesTest(unittest.TestCase):
    def test_attributes_and_context_managers(self):
        types = [("a", "b"), ["c", "d"]]
        with pprofkit.Recorder(types, codec="zstd") as rec:
            self.assertEqual(rec.sample_types, (("a", "b"), ("c", "d")))
            self.assertIsInstance(rec.sample_types, tuple)
            self.assertEqual(rec.codec, "zstd")
            self.assertFalse(rec.closed)
            with pprofkit.Sample(rec) as smp:
                self.assertIs(smp.recorder, rec)
                smp.record([("f",)], [1, 2])
            with self.assertRaises(pprofkit.ClosedError):
                smp.start()  # the with block closed the Sample
            p = support.decode(rec.export().data)
            self.assertEqual(p.samples, [([("f", "", 0)], {}, [1, 2])])
        self.assertTrue(rec.closed)
        with self.assertRaises(pprofkit.ClosedError):
            rec.export()

    def test_exceptions_pass_through_with(self):
        with self.assertRaises(KeyError):
            with pprofkit.Recorder(TYPES) as rec:
                raise KeyError("x")
        self.assertTrue(rec.closed)

    def test_package(self):
        self.assertEqual(pprofkit.__version__, pprofkit.VERSION)
        self.assertRegex(pprofkit.VERSION, r"^\d+\.\d+\.\d+")
        self.assertEqual(pprofkit.WALL_TIME, ("wall-time", "nanoseconds"))
        self.assertIsInstance(pprofkit.now_ns(), int)
        self.assertGreater(pprofkit.now_ns(), 1_600_000_000 * 10**9)
        for name in pprofkit.__all__:
            self.assertTrue(hasattr(pprofkit, name), name)

    def test_garbage_collected_without_close(self):
        with tempfile.TemporaryDirectory() as d:
            rec = pprofkit.Recorder(TYPES, out_dir=d, name="gc")
            smp = pprofkit.Sample(rec)
            smp.record([("f",)], [1, 1])
            del rec  # the Sample still holds it
            smp.record([("g",)], [1, 1])
            del smp  # the last reference: the window goes to the file sink
            (name,) = os.listdir(d)
            with open(os.path.join(d, name), "rb") as f:
                self.assertEqual(support.decode(f.read()).total("samples"), 2)


class FileSinkTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.dir = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def check_file(self, path, expected):
        flat, text = support.go_top(path, "samples")
        self.assertEqual(flat, expected, text)

    def test_out_dir(self):
        rec = pprofkit.Recorder(TYPES, out_dir=self.dir, name="app")
        smp = pprofkit.Sample(rec)
        smp.record([("first", "f.py", 1)], [1, 1])
        rec.export_to_sinks()
        smp.record([("second", "s.py", 1)], [1, 1])
        smp.record([("second", "s.py", 1)], [1, 1])
        self.assertEqual(len(os.listdir(self.dir)), 1)
        smp.close()
        rec.close()  # exports the last window to the sink
        names = sorted(os.listdir(self.dir))
        pid = os.getpid()
        self.assertEqual(names, ["app.%d.1.pb.gz" % pid, "app.%d.2.pb.gz" % pid])
        self.check_file(os.path.join(self.dir, names[0]), {"first": 1})
        self.check_file(os.path.join(self.dir, names[1]), {"second": 2})

    def test_add_file_sink(self):
        other = os.path.join(self.dir, "other")
        os.mkdir(other)
        with pprofkit.Recorder(TYPES, codec="gzip") as rec:
            self.assertIsNone(rec.add_file_sink(self.dir))
            rec.add_file_sink(dir=other, name=b"named")
            with pprofkit.Sample(rec) as smp:
                smp.record([("f", "f.py", 1)], [1, 1], {"k": "v"})
                smp.record([("g", "g.py", 1)], [1, 1])
        pid = os.getpid()
        self.assertEqual(sorted(os.listdir(self.dir)), ["other", "profile.%d.1.pb.gz" % pid])
        self.assertEqual(os.listdir(other), ["named.%d.1.pb.gz" % pid])
        for path in (os.path.join(self.dir, "profile.%d.1.pb.gz" % pid),
                     os.path.join(other, "named.%d.1.pb.gz" % pid)):
            self.check_file(path, {"f": 1, "g": 1})

    def test_files_are_never_replaced(self):
        for _ in range(2):
            with pprofkit.Recorder(TYPES, out_dir=self.dir) as rec:
                pprofkit.Sample(rec).record([("f",)], [1, 1])
        names = sorted(os.listdir(self.dir))
        self.assertEqual(len(names), 2)
        pattern = re.compile(r"^profile\.%d\.1(-2)?\.pb\.gz$" % os.getpid())
        self.assertTrue(all(pattern.match(n) for n in names), names)

    def test_zstd_and_none_file_names(self):
        for codec, ext in (("zstd", ".pb.zst"), ("none", ".pb")):
            with pprofkit.Recorder(TYPES, out_dir=self.dir, codec=codec, name=codec) as rec:
                pprofkit.Sample(rec).record([("f",)], [1, 1])
            name = "%s.%d.1%s" % (codec, os.getpid(), ext)
            with open(os.path.join(self.dir, name), "rb") as f:
                self.assertEqual(support.decode(f.read()).total("samples"), 1)

    def test_missing_directory(self):
        # Refused when the recorder is made; a directory that goes away later makes
        # the sink's writes fail, counted.
        missing = os.path.join(self.dir, "missing")
        with self.assertRaises(pprofkit.SystemCallError) as cm:
            pprofkit.Recorder(TYPES, out_dir=missing)
        self.assertIsInstance(cm.exception, OSError)
        self.assertIn("No such file or directory", str(cm.exception))
        os.mkdir(missing)
        rec = pprofkit.Recorder(TYPES, out_dir=missing)
        try:
            os.rmdir(missing)
            pprofkit.Sample(rec).record([("f",)], [1, 1])
            rec.export_to_sinks()
            self.assertEqual(rec.stats()["sink_failures"], 1)
        finally:
            rec.close()
        self.assertFalse(os.path.exists(missing))

    def test_background_exporter(self):
        with pprofkit.Recorder(TYPES, out_dir=self.dir, export_period_ms=3_600_000) as rec:
            rec.start()
            rec.start()  # starting a started recorder does nothing
            pprofkit.Sample(rec).record([("f",)], [1, 1])
            rec.stop()   # the exporter's last export
            rec.stop()
            self.assertEqual(rec.stats()["windows_exported"], 1)
            self.assertEqual(os.listdir(self.dir), ["profile.%d.1.pb.gz" % os.getpid()])
        # close() has nothing left to export: an empty window makes no file.
        self.assertEqual(os.listdir(self.dir), ["profile.%d.1.pb.gz" % os.getpid()])
        self.check_file(os.path.join(self.dir, os.listdir(self.dir)[0]), {"f": 1})

    def test_close_exports_what_is_left(self):
        with pprofkit.Recorder(TYPES, out_dir=self.dir, export_period_ms=3_600_000) as rec:
            rec.start()
            smp = pprofkit.Sample(rec)
            smp.record([("f",)], [1, 1])
            rec.stop()
            smp.record([("g",)], [1, 1])  # after the exporter's last export
        names = sorted(os.listdir(self.dir))
        self.assertEqual(len(names), 2)
        self.check_file(os.path.join(self.dir, names[0]), {"f": 1})
        self.check_file(os.path.join(self.dir, names[1]), {"g": 1})


class LimitsTest(unittest.TestCase):
    def test_max_frames(self):
        with pprofkit.Recorder(TYPES, max_frames=4) as rec:
            smp = pprofkit.Sample(rec)
            smp.record([("f%d" % i, "x.py", i) for i in range(10)], [1, 1])
            smp.start()
            for i in range(6):
                smp.push_frame("g%d" % i)
            smp.set_value(1, 1)
            smp.flush()
            smp.record([("h%d" % i,) for i in range(4)], [1, 1])  # exactly max_frames
            e = rec.export()
            p = support.decode(e.data)
            stacks = sorted([f[0] for f in stack] for stack, _, _ in p.samples)
            self.assertEqual(stacks, sorted([
                ["f0", "f1", "f2", "<7 frames omitted>"],
                ["g0", "g1", "g2", "<3 frames omitted>"],
                ["h0", "h1", "h2", "h3"],
            ]))
            self.assertEqual(e.stats["stacks_truncated"], 2)
            self.assertEqual(rec.stats()["stacks_truncated"], 2)
            flat, _ = support.go_top(e.data, "samples")
            self.assertEqual(flat["f0"], 1)
            self.assertIn("<7 frames omitted>", flat)

    def test_memory_limit_degrades_and_keeps_totals(self):
        n = 3000
        with pprofkit.Recorder([pprofkit.SAMPLES, pprofkit.CPU_TIME], memory_limit=65536,
                               chunk_size=4096) as rec:
            with pprofkit.Sample(rec) as smp:
                # Every sample a new function, string and numeric label: past the
                # budget each needs room the window no longer has (a string label
                # becomes the placeholder's, which may be in already; the number is new).
                for i in range(n):
                    smp.record([("fn%d" % i, "file%d.py" % i, i)], [1, i],
                               {"k": "value%d" % i, "n": i})
            e = rec.export()
            st = rec.stats()
        p = support.decode(e.data)
        self.assertEqual(p.total("samples"), n)
        self.assertEqual(p.total("cpu-time"), n * (n - 1) // 2)
        self.assertLess(len(p.samples), n)
        self.assertLessEqual(e.stats["memory_peak_bytes"], 65536 + 4096 + 4096)
        for key in ("strings_dropped", "stacks_dropped", "labels_dropped"):
            self.assertGreater(e.stats[key], 0, key)
            self.assertEqual(st[key], e.stats[key], key)
        self.assertEqual(st["samples_flushed"], n)
        self.assertEqual(st["samples_dropped_nomem"], 0)
        self.assertTrue(any("memory limit" in c for c in p.comments), p.comments)
        flat, text = support.go_top(e.data, "samples")
        self.assertIn("Total samples = %d" % n, text)
        self.assertGreater(flat.get("[pprofkit: memory limit]", 0), 0)


if __name__ == "__main__":
    unittest.main()
