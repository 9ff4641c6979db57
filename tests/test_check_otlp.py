#!/usr/bin/env python3
"""test_check_otlp.py - check_otlp.py is not vacuous (unittest, python3-protobuf).

A small request and the pprof of the same export are written here by hand: two sample
types, a combined sample, a sample left out of one type (its value is 0), the empty
stack, an inlined location without a mapping, numeric and string labels, and two
timestamped samples combined into one OTLP Sample. The pair passes every check; then
each test breaks one rule and asserts that the checker names it.
"""

import gzip
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_otlp  # noqa: E402

O = check_otlp.otlp_pb2
P = check_otlp.profile_pb2
T0 = 1700000000000000000
T1, T2 = T0 + 100000000, T0 + 200000000
EXPECT = {"service_name": "svc", "sdk_language": "cpp", "pid": 4242, "host_name": "box",
          "service_version": "1.2", "environment": "prod", "attributes": {"team": "core"}}


def make_pprof():
    p = P.Profile()
    p.string_table.extend(["", "samples", "count", "cpu", "nanoseconds", "/usr/bin/app",
                           "main", "app.c", "work", "inl", "thread", "worker", "bytes",
                           "end_timestamp_ns"])
    for t, u in ((1, 2), (3, 4)):
        p.sample_type.add(type=t, unit=u)
    p.period_type.type, p.period_type.unit, p.period = 3, 4, 10000000
    p.time_nanos, p.duration_nanos = T0, 60000000000
    p.mapping.add(id=1, memory_start=0x400000, memory_limit=0x500000, filename=5)
    for fid, name in ((1, 6), (2, 8), (3, 9)):
        p.function.add(id=fid, name=name, system_name=name, filename=7)
    loc = p.location.add(id=1, mapping_id=1, address=0x401000)
    loc.line.add(function_id=1, line=10)
    loc = p.location.add(id=2, mapping_id=1, address=0x401100)
    loc.line.add(function_id=2, line=20)
    loc = p.location.add(id=3, address=0x7000)
    loc.line.add(function_id=3, line=5)
    loc.line.add(function_id=2, line=21)

    def sample(locs, values, labels=(), ts=None):
        """labels: (key, text) string labels and (key, number, unit) numeric ones."""
        s = p.sample.add(location_id=locs, value=values)
        idx = list(p.string_table).index
        for k, v, *unit in labels:
            if isinstance(v, int):
                s.label.add(key=idx(k), num=v, num_unit=idx(unit[0]))
            else:
                s.label.add(key=idx(k), str=idx(v))
        if ts is not None:
            s.label.add(key=idx("end_timestamp_ns"), num=ts)

    sample([2, 1], [3, 30], [("thread", "main")])    # twice: combined
    sample([2, 1], [2, 20], [("thread", "main")])
    sample([3, 1], [1, 0], [("thread", "worker"), ("bytes", 64, "bytes")])  # not in cpu
    sample([], [4, 40])                                # the empty stack
    sample([2, 1], [1, 10], [("thread", "worker")], ts=T1)  # timestamped, combined
    sample([2, 1], [1, 15], [("thread", "worker")], ts=T2)
    return p


def make_request():
    r = O.ExportProfilesServiceRequest()
    d = r.dictionary
    d.string_table.extend(["", "samples", "count", "cpu", "nanoseconds", "/usr/bin/app",
                           "main", "app.c", "work", "inl", "thread", "worker", "bytes"])
    d.mapping_table.add()
    d.mapping_table.add(memory_start=0x400000, memory_limit=0x500000, filename_strindex=5)
    d.function_table.add()
    for name in (6, 8, 9):
        d.function_table.add(name_strindex=name, system_name_strindex=name,
                             filename_strindex=7)
    d.location_table.add()
    d.location_table.add(mapping_index=1, address=0x401000).lines.add(function_index=1, line=10)
    d.location_table.add(mapping_index=1, address=0x401100).lines.add(function_index=2, line=20)
    loc = d.location_table.add(address=0x7000)
    loc.lines.add(function_index=3, line=5)
    loc.lines.add(function_index=2, line=21)
    d.link_table.add()
    d.stack_table.add()
    d.stack_table.add(location_indices=[2, 1])
    d.stack_table.add(location_indices=[3, 1])
    d.attribute_table.add()
    d.attribute_table.add(key_strindex=10).value.string_value = "main"
    d.attribute_table.add(key_strindex=10).value.string_value = "worker"
    d.attribute_table.add(key_strindex=12, unit_strindex=12).value.int_value = 64

    rp = r.resource_profiles.add()
    for k, v in (("service.name", "svc"), ("telemetry.sdk.name", "pprofkit"),
                 ("telemetry.sdk.language", "cpp"), ("telemetry.sdk.version", "0.1.0"),
                 ("process.pid", 4242), ("host.name", "box"), ("service.version", "1.2"),
                 ("deployment.environment.name", "prod"), ("team", "core")):
        kv = rp.resource.attributes.add(key=k)
        if isinstance(v, int):
            kv.value.int_value = v
        else:
            kv.value.string_value = v
    sp = rp.scope_profiles.add()
    sp.scope.name, sp.scope.version = "pprofkit", "0.1.0"
    for n, (t, u, vals) in enumerate(((1, 2, (5, 1, 4, (1, 1))), (3, 4, (50, None, 40, (10, 15))))):
        p = sp.profiles.add(time_unix_nano=T0, duration_nano=60000000000, period=10000000,
                            profile_id=bytes([n + 1]) * 16)
        p.sample_type.type_strindex, p.sample_type.unit_strindex = t, u
        p.period_type.type_strindex, p.period_type.unit_strindex = 3, 4
        p.samples.add(stack_index=1, attribute_indices=[1], values=[vals[0]])
        if vals[1] is not None:
            p.samples.add(stack_index=2, attribute_indices=[2, 3], values=[vals[1]])
        p.samples.add(stack_index=0, values=[vals[2]])
        p.samples.add(stack_index=1, attribute_indices=[2], values=vals[3],
                      timestamps_unix_nano=[T1, T2])
    return r


def profiles(r):
    return r.resource_profiles[0].scope_profiles[0].profiles


class CheckOtlpTest(unittest.TestCase):
    def setUp(self):
        self.req, self.prof = make_request(), make_pprof()

    def failures(self, expect=EXPECT):
        return (check_otlp.request_failures(self.req, expect) +
                check_otlp.conservation_failures(self.req, self.prof))

    def assertFails(self, fragment, expect=EXPECT):
        got = self.failures(expect)
        self.assertTrue(any(fragment in m for m in got),
                        "no failure mentions %r; failures: %r" % (fragment, got))

    def test_valid(self):
        self.assertEqual(self.failures(), [])
        body = self.req.SerializeToString()
        for b in (body, gzip.compress(body)):
            self.assertEqual(check_otlp.decode_request(b), self.req)
        self.assertEqual(check_otlp.read_pprof(gzip.compress(self.prof.SerializeToString())),
                         self.prof)

    def test_decode_failures(self):
        utf8 = O.ExportProfilesServiceRequest()
        utf8.dictionary.string_table.extend(["", "ab"])
        bad_utf8 = utf8.SerializeToString().replace(b"ab", b"\xff\xfe")
        for bad in (b"\x0a\x05\x0a\x03\x0a\x01", bad_utf8, gzip.compress(b"\x12\x00")[:-3]):
            with self.assertRaises(check_otlp.DecodeFailure):
                check_otlp.decode_request(bad)
        # unknown field 15 inside the request: parsed, and reported
        req = check_otlp.decode_request(self.req.SerializeToString() + b"\x78\x01")
        self.assertIn("the request holds unknown fields", check_otlp.request_failures(req))

    def test_zero_first_rows(self):
        d = self.req.dictionary
        breaks = {"mapping_table": lambda: setattr(d.mapping_table[0], "memory_start", 1),
                  "location_table": lambda: setattr(d.location_table[0], "address", 1),
                  "function_table": lambda: setattr(d.function_table[0], "start_line", 1),
                  "link_table": lambda: setattr(d.link_table[0], "trace_id", b"t" * 16),
                  "string_table": lambda: d.string_table.__setitem__(0, "x"),
                  "attribute_table": lambda: setattr(d.attribute_table[0], "key_strindex", 1),
                  "stack_table": lambda: d.stack_table[0].location_indices.append(1)}
        for table, mutate in breaks.items():
            with self.subTest(table=table):
                self.setUp()
                d = self.req.dictionary
                mutate()
                self.assertFails("dictionary.%s[0] is not the zero value" % table)

    def test_out_of_range(self):
        def d():
            return self.req.dictionary

        def p0():
            return profiles(self.req)[0]
        cases = [
            ("sample_type.type_strindex", lambda: setattr(p0().sample_type, "type_strindex", 99)),
            ("sample_type.unit_strindex", lambda: setattr(p0().sample_type, "unit_strindex", -1)),
            ("period_type.type_strindex", lambda: setattr(p0().period_type, "type_strindex", 13)),
            ("stack_index 3", lambda: setattr(p0().samples[0], "stack_index", 3)),
            ("attribute index 4", lambda: p0().samples[0].attribute_indices.append(4)),
            ("attribute index 0", lambda: p0().samples[0].attribute_indices.append(0)),
            ("link_index 1", lambda: setattr(p0().samples[0], "link_index", 1)),
            ("mapping 1 filename", lambda: setattr(d().mapping_table[1], "filename_strindex", 13)),
            ("location 1 mapping", lambda: setattr(d().location_table[1], "mapping_index", 2)),
            ("location 3 line function",
             lambda: setattr(d().location_table[3].lines[1], "function_index", 4)),
            ("function 1 name_strindex", lambda: setattr(d().function_table[1], "name_strindex", 20)),
            ("function 2 system_name_strindex",
             lambda: setattr(d().function_table[2], "system_name_strindex", 13)),
            ("function 3 filename_strindex",
             lambda: setattr(d().function_table[3], "filename_strindex", -2)),
            ("stack 2 location: index 4", lambda: d().stack_table[2].location_indices.append(4)),
            ("attribute 1 key: index 0", lambda: setattr(d().attribute_table[1], "key_strindex", 0)),
            ("attribute 3 unit", lambda: setattr(d().attribute_table[3], "unit_strindex", 13)),
            ("mapping 1 attribute", lambda: d().mapping_table[1].attribute_indices.append(4)),
            ("location 2 attribute", lambda: d().location_table[2].attribute_indices.append(0)),
            ("profile 1 attribute index", lambda: profiles(self.req)[1].attribute_indices.append(9)),
        ]
        for fragment, mutate in cases:
            with self.subTest(fragment=fragment):
                self.setUp()
                mutate()
                self.assertFails(fragment)

    def test_location_zero_in_stack(self):
        # Location 0 is a frame nothing is known of: well formed, but a frame more than
        # the pprof's stack has.
        self.req.dictionary.stack_table[1].location_indices.insert(1, 0)
        self.assertEqual(check_otlp.request_failures(self.req, EXPECT), [])
        self.assertNotEqual(self.failures(), [])

    def test_duplicates(self):
        d = self.req.dictionary
        d.string_table.append("work")
        d.stack_table.add().CopyFrom(d.stack_table[2])
        d.attribute_table.add().CopyFrom(d.attribute_table[2])
        got = check_otlp.request_failures(self.req, EXPECT)
        for frag in ("string_table[13] duplicates [8]", "stack_table[3] duplicates [2]",
                     "attribute_table[4] duplicates [2]"):
            self.assertIn("dictionary." + frag, got)

    def test_same_identity(self):
        s = profiles(self.req)[1].samples
        s.add(stack_index=0, values=[1])
        self.assertFails("profile 1 sample 3: same identity as sample 1")
        s[3].attribute_indices.append(1)   # another identity: only the sum differs
        self.assertEqual(check_otlp.request_failures(self.req, EXPECT), [])
        self.assertFails("profile 1 (cpu) sum")

    def test_values_timestamps(self):
        s = profiles(self.req)[0].samples
        s[3].values.append(1)
        self.assertFails("profile 0 sample 3: 3 values and 2 timestamps")
        self.setUp()
        profiles(self.req)[0].samples[0].values.append(1)
        self.assertFails("profile 0 sample 0: 2 values and 0 timestamps")

    def test_resource(self):
        for key in ("service.name", "telemetry.sdk.name", "telemetry.sdk.language",
                    "telemetry.sdk.version", "process.pid", "host.name"):
            with self.subTest(key=key):
                self.setUp()
                attrs = self.req.resource_profiles[0].resource.attributes
                del attrs[[a.key for a in attrs].index(key)]
                self.assertFails("resource attribute %r is missing" % key, {})
        self.setUp()
        self.assertFails("service.name 'svc', expected 'other'", dict(EXPECT, service_name="other"))
        self.assertFails("user attributes {'team': 'core'}, expected {}",
                         dict(EXPECT, attributes={}))
        self.assertFails("service.version '1.2', expected None",
                         dict(EXPECT, service_version=None))
        attrs = self.req.resource_profiles[0].resource.attributes
        attrs[4].value.string_value = "4242"
        self.assertFails("'process.pid' is string_value, expected int_value")
        attrs.add(key="team").value.string_value = "core"
        self.assertFails("resource attribute 'team' repeats")

    def test_scope_and_profile_ids(self):
        profiles(self.req)[0].profile_id = bytes(16)
        self.assertFails("profile 0 profile_id is all zero")
        profiles(self.req)[1].profile_id = bytes(16)
        self.assertFails("profile 1 profile_id repeats an earlier one")
        profiles(self.req)[1].profile_id = b"\x01" * 8
        self.assertFails("profile 1 profile_id has 8 bytes")
        self.req.resource_profiles[0].scope_profiles[0].scope.name = "other"
        self.assertFails("scope.name 'other'")

    def test_conservation_value(self):
        profiles(self.req)[1].samples[0].values[0] += 1
        self.assertEqual(check_otlp.request_failures(self.req, EXPECT), [])
        self.assertFails("profile 1 (cpu) sum: [work;main] [('thread', 'main', '')] "
                         "otlp 51 pprof 50")

    def test_lost_timestamped_sample(self):
        s = profiles(self.req)[0].samples[3]
        del s.values[1]
        del s.timestamps_unix_nano[1]
        self.assertEqual(check_otlp.request_failures(self.req, EXPECT), [])
        self.assertFails("profile 0 (samples) timestamped count")
        self.assertFails("profile 0 (samples) sum")

    def test_timestamp_moved(self):
        profiles(self.req)[1].samples[-1].timestamps_unix_nano[0] += 1
        self.assertFails("profile 1 (cpu) timestamped count")

    def test_wrong_line(self):
        self.req.dictionary.location_table[1].lines[0].line = 11
        self.assertEqual(check_otlp.request_failures(self.req, EXPECT), [])
        self.assertFails("profile 0 (samples) sum")

    def test_period_and_types(self):
        profiles(self.req)[0].period = 1
        self.assertFails("profile 0 (samples): period 1, pprof 10000000")
        self.setUp()
        del profiles(self.req)[1]
        self.assertFails("sample types [('samples', 'count')], pprof")

    def test_pairing(self):
        other = make_request()
        for p in profiles(other):
            p.time_unix_nano = T0 + 1
        pairs, failures = check_otlp.pair_exports(
            [("a", self.req), ("b", other)], [("a.pprof", self.prof)])
        self.assertEqual([(x[0], x[2]) for x in pairs], [("a", "a.pprof")])
        self.assertEqual(failures, ["b: no pprof with time_nanos %d" % (T0 + 1)])
        pairs, failures = check_otlp.pair_exports([], [("a.pprof", self.prof)])
        self.assertEqual(failures, ["a.pprof: no request with time_unix_nano %d" % T0])

    def test_cli(self):
        with tempfile.TemporaryDirectory() as tmp:
            paths = {n: os.path.join(tmp, n) for n in ("req.bin", "bad.bin", "p.pprof")}
            with open(paths["req.bin"], "wb") as f:
                f.write(gzip.compress(self.req.SerializeToString()))
            with open(paths["p.pprof"], "wb") as f:
                f.write(gzip.compress(self.prof.SerializeToString()))
            profiles(self.req)[0].samples[0].values[0] = 6
            with open(paths["bad.bin"], "wb") as f:
                f.write(self.req.SerializeToString())
            for args, rc in (([paths["req.bin"]], 0),
                             (["--pprof", paths["p.pprof"], paths["req.bin"]], 0),
                             (["--expect", '{"pid": 1}', paths["req.bin"]], 1),
                             (["--pprof", paths["p.pprof"], paths["bad.bin"]], 1),
                             (["--pprof", paths["p.pprof"], paths["req.bin"], paths["bad.bin"]], 1)):
                with self.subTest(args=args):
                    r = subprocess.run([sys.executable, check_otlp.__file__] + args,
                                       capture_output=True, text=True)
                    self.assertEqual(r.returncode, rc, r.stderr)
                    self.assertIn("check_otlp: ", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
