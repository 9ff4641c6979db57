#!/usr/bin/env python3
"""check_otlp.py - checks OTLP profiles requests against what pprofkit's encoder promises.

An independent reader: the requests are decoded by Google's protobuf runtime (Debian's
python3-protobuf, so run it with /usr/bin/python3) from modules that protoc generates,
once per process, out of tests/otlp/profiles.proto and pprof's profile.proto; each body is
also decoded by `protoc --decode`. The rules come from the OTLP profiles specification
(opentelemetry-proto 1.9.0, v1development) and the encoder's documented promises, never
from the encoder's code:
  - one ResourceProfiles with the resource attributes pprofkit sets, one ScopeProfiles
    named "pprofkit", one Profile per pprof sample type, in the pprof's order;
  - the dictionary: every table starts with its zero value, holds no duplicate, and every
    index into it is in range (a stack may hold location 0, the zero Location: a frame
    nothing is known of);
  - samples: a unique identity (stack, attribute set, link) per Profile and shape (an
    aggregate and a timestamped series may share one); either one value and no
    timestamp, or as many values as timestamps;
  - conservation against the pprof of the same export: per sample type, values summed by
    (frames, labels) agree, and the timestamped (frames, labels, time, value) agree as
    multisets. A frame is a location's lines (function name, system name, file, line),
    its mapping's file ("" without a mapping) and its address; a pprof label whose str
    index is 0 is numeric, as go tool pprof reads it; the numeric label
    "end_timestamp_ns" is the sample's timestamp, not a label.

Module use: decode_request(body) -> request; request_failures(request, expect) and
conservation_failures(request, pprof) -> list of failure strings; read_pprof(path or
bytes); pair_exports(requests, pprofs) pairs both by time_unix_nano == time_nanos.

Usage: check_otlp.py [--expect JSON] [--pprof FILE]... REQUEST_FILE...
  --expect  a JSON object: service_name, sdk_language, pid, host_name, service_version,
            environment (null: absent), attributes (the user attributes, exactly)
  --pprof   (repeatable) the pprof files of the same exports, paired with the requests
Exit status 0 when every check passed; each failure is printed, then a summary line.
"""

import argparse
import collections
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

OTLP_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "otlp")
PROFILE_PROTO = os.environ.get(
    "PPK_PROFILE_PROTO",
    "/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto")
REQUEST_TYPE = "ppk_otlp_test.ExportProfilesServiceRequest"
GZIP_MAGIC = b"\x1f\x8b"
TIMESTAMP_LABEL = "end_timestamp_ns"
KNOWN_KEYS = ("service.name", "telemetry.sdk.name", "telemetry.sdk.language",
              "telemetry.sdk.version", "process.pid", "host.name", "service.version",
              "deployment.environment.name")


def _generate():
    """Runs protoc --python_out for both .proto files and loads the two modules."""
    out = tempfile.mkdtemp(prefix="ppk-otlp-pb2.")
    try:
        mods = []
        for proto in (os.path.join(OTLP_DIR, "profiles.proto"), PROFILE_PROTO):
            d, name = os.path.split(proto)
            subprocess.run(["protoc", "--python_out=" + out, "-I", d, name], check=True)
            mod = name[:-len(".proto")] + "_pb2"
            spec = importlib.util.spec_from_file_location(mod, os.path.join(out, mod + ".py"))
            m = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(m)
            mods.append(m)
        return mods
    finally:
        shutil.rmtree(out, ignore_errors=True)


otlp_pb2, profile_pb2 = _generate()


class DecodeFailure(Exception):
    pass


def decode_request(body):
    """Returns the ExportProfilesServiceRequest in body (gzip or raw protobuf); raises
    DecodeFailure when the runtime or protoc --decode cannot read it."""
    try:
        raw = gzip.decompress(body) if body[:2] == GZIP_MAGIC else bytes(body)
        req = otlp_pb2.ExportProfilesServiceRequest()
        req.ParseFromString(raw)
    except Exception as e:  # gzip, protobuf and UTF-8 errors alike
        raise DecodeFailure("cannot decode the request: %r" % e) from e
    r = subprocess.run(["protoc", "--decode=" + REQUEST_TYPE, "-I", OTLP_DIR,
                        "profiles.proto"], input=raw, capture_output=True)
    if r.returncode != 0 or r.stderr:
        raise DecodeFailure("protoc --decode: exit %d: %s" % (
            r.returncode, r.stderr.decode("utf-8", "replace").strip()[:500]))
    return req


def read_pprof(src):
    """Returns the perftools.profiles.Profile in a file path or bytes (gzip or raw)."""
    if isinstance(src, (str, os.PathLike)):
        with open(src, "rb") as f:
            src = f.read()
    if src[:2] == GZIP_MAGIC:
        src = gzip.decompress(src)
    return profile_pb2.Profile.FromString(src)


def value_of(any_value):
    """The Python value of an AnyValue (None when unset)."""
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


# ---- structure --------------------------------------------------------------------------

def request_failures(req, expect=None):
    """Every structural rule; expect (a dict) gives exact values to compare."""
    expect = expect or {}
    out = []

    def check(cond, msg):
        if not cond:
            out.append(msg)
        return cond

    bare = otlp_pb2.ExportProfilesServiceRequest()
    bare.CopyFrom(req)
    bare.DiscardUnknownFields()
    check(bare.ByteSize() == req.ByteSize(), "the request holds unknown fields")
    if not check(len(req.resource_profiles) == 1,
                 "%d resource_profiles, expected 1" % len(req.resource_profiles)):
        return out
    rp = req.resource_profiles[0]
    out += resource_failures(rp.resource.attributes, expect)
    if not check(len(rp.scope_profiles) == 1,
                 "%d scope_profiles, expected 1" % len(rp.scope_profiles)):
        return out
    sp = rp.scope_profiles[0]
    check(sp.scope.name == "pprofkit", "scope.name %r" % sp.scope.name)
    check(sp.scope.version != "", "scope.version is empty")
    out += dictionary_failures(req.dictionary)
    check(len(sp.profiles) >= 1, "no profile")
    d = req.dictionary
    ids = set()
    for i, p in enumerate(sp.profiles):
        what = "profile %d" % i
        for vt, name in ((p.sample_type, "sample_type"), (p.period_type, "period_type")):
            for f in ("type_strindex", "unit_strindex"):
                check(0 <= getattr(vt, f) < len(d.string_table),
                      "%s %s.%s %d out of range" % (what, name, f, getattr(vt, f)))
        check(len(p.profile_id) == 16, "%s profile_id has %d bytes" % (what, len(p.profile_id)))
        check(p.profile_id.strip(b"\0") != b"", "%s profile_id is all zero" % what)
        check(p.profile_id not in ids, "%s profile_id repeats an earlier one" % what)
        ids.add(p.profile_id)
        check((p.time_unix_nano, p.duration_nano) ==
              (sp.profiles[0].time_unix_nano, sp.profiles[0].duration_nano),
              "%s time or duration differs from profile 0's" % what)
        for a in p.attribute_indices:
            check(0 < a < len(d.attribute_table), "%s attribute index %d out of range" % (what, a))
        out += sample_failures(p.samples, d, what)
    return out


def resource_failures(attrs, expect):
    out = []
    got = {}
    for kv in attrs:
        if kv.key in got:
            out.append("resource attribute %r repeats" % kv.key)
        got[kv.key] = kv.value
    kinds = {"process.pid": "int_value"}
    # process.pid and host.name are the sink's; expect None for them where the request
    # has none (pprofkit otlp converts a file: no process, no host).
    absent = {"process.pid": "pid" in expect and expect["pid"] is None,
              "host.name": "host_name" in expect and expect["host_name"] is None}
    for key in KNOWN_KEYS[:6]:
        if key not in got and not absent.get(key):
            out.append("resource attribute %r is missing" % key)
    for key, v in got.items():
        kind = kinds.get(key, "string_value")
        if v.WhichOneof("value") != kind:
            out.append("resource attribute %r is %s, expected %s" % (
                key, v.WhichOneof("value"), kind))
    val = {k: value_of(v) for k, v in got.items()}
    if "telemetry.sdk.name" in val and val["telemetry.sdk.name"] != "pprofkit":
        out.append("telemetry.sdk.name %r" % val["telemetry.sdk.name"])
    if val.get("telemetry.sdk.version", "x") == "":
        out.append("telemetry.sdk.version is empty")
    for ek, key in (("service_name", "service.name"), ("sdk_language", "telemetry.sdk.language"),
                    ("pid", "process.pid"), ("host_name", "host.name"),
                    ("service_version", "service.version"),
                    ("environment", "deployment.environment.name")):
        if ek in expect and val.get(key) != expect[ek]:
            out.append("%s %r, expected %r" % (key, val.get(key), expect[ek]))
    if "attributes" in expect:
        user = {k: v for k, v in val.items() if k not in KNOWN_KEYS}
        want = dict(expect["attributes"])
        for k in list(want):
            if k in KNOWN_KEYS:
                if val.get(k) != want[k]:
                    out.append("attribute %s %r, expected %r" % (k, val.get(k), want[k]))
                del want[k]
        if user != want:
            out.append("user attributes %r, expected %r" % (user, want))
    return out


TABLES = ("string_table", "mapping_table", "location_table", "function_table",
          "link_table", "attribute_table", "stack_table")


def dictionary_failures(d):
    out = []

    def check(cond, msg):
        if not cond:
            out.append(msg)

    def ref(i, table, what, zero_ok=True):
        check((0 if zero_ok else 1) <= i < len(getattr(d, table)),
              "%s: index %d into %s out of range" % (what, i, table))

    for t in TABLES:
        rows = getattr(d, t)
        if not rows:
            out.append("dictionary.%s is empty" % t)
            continue
        zero = rows[0] == "" if t == "string_table" else rows[0].ByteSize() == 0
        check(zero, "dictionary.%s[0] is not the zero value: %r" % (t, rows[0]))
        seen = {}
        for i, row in enumerate(rows):
            k = row if t == "string_table" else row.SerializeToString(deterministic=True)
            if k in seen:
                out.append("dictionary.%s[%d] duplicates [%d]" % (t, i, seen[k]))
            seen.setdefault(k, i)
    check(len(d.link_table) <= 1, "dictionary.link_table has %d links" % len(d.link_table))
    for i, m in enumerate(d.mapping_table):
        ref(m.filename_strindex, "string_table", "mapping %d filename" % i)
        for a in m.attribute_indices:
            ref(a, "attribute_table", "mapping %d attribute" % i, False)
    for i, loc in enumerate(d.location_table):
        ref(loc.mapping_index, "mapping_table", "location %d mapping" % i)
        for line in loc.lines:
            ref(line.function_index, "function_table", "location %d line function" % i)
        for a in loc.attribute_indices:
            ref(a, "attribute_table", "location %d attribute" % i, False)
    for i, f in enumerate(d.function_table):
        for field in ("name_strindex", "system_name_strindex", "filename_strindex"):
            ref(getattr(f, field), "string_table", "function %d %s" % (i, field))
    # A stack may hold location 0: the zero Location, a frame nothing is known of (a
    # pprof location without address, mapping or lines). Conservation compares frames.
    for i, s in enumerate(d.stack_table):
        for li in s.location_indices:
            ref(li, "location_table", "stack %d location" % i)
    for i, a in enumerate(d.attribute_table[1:], 1):
        ref(a.key_strindex, "string_table", "attribute %d key" % i, False)
        ref(a.unit_strindex, "string_table", "attribute %d unit" % i)
        kind = a.value.WhichOneof("value")
        check(kind in ("string_value", "int_value"), "attribute %d value is %s" % (i, kind))
        if kind == "string_value":
            check(a.unit_strindex == 0, "attribute %d: a string value with a unit" % i)
    return out


def sample_failures(samples, d, what):
    out = []
    identities = {}
    strings = list(d.string_table)
    ts_key = strings.index(TIMESTAMP_LABEL) if TIMESTAMP_LABEL in strings else None
    for j, s in enumerate(samples):
        w = "%s sample %d" % (what, j)
        if not 0 <= s.stack_index < len(d.stack_table):
            out.append("%s: stack_index %d out of range" % (w, s.stack_index))
        if s.link_index != 0:
            out.append("%s: link_index %d, expected 0" % (w, s.link_index))
        keys = []
        for a in s.attribute_indices:
            if 0 < a < len(d.attribute_table):
                keys.append(d.attribute_table[a].key_strindex)
            else:
                out.append("%s: attribute index %d out of range" % (w, a))
        if len(set(keys)) != len(keys):
            out.append("%s: attribute keys repeat" % w)
        if ts_key is not None and ts_key in keys:
            out.append("%s: %s is an attribute" % (w, TIMESTAMP_LABEL))
        nv, nt = len(s.values), len(s.timestamps_unix_nano)
        if not (nv == nt >= 1 or (nv == 1 and nt == 0)):
            out.append("%s: %d values and %d timestamps" % (w, nv, nt))
        # One Sample per identity and shape: an aggregate (no timestamp) and a timestamped
        # series of the same stack and attributes cannot be one Sample (values and
        # timestamps must pair up), so both may appear.
        ident = (s.stack_index, frozenset(s.attribute_indices), s.link_index, nt > 0)
        if ident in identities:
            out.append("%s: same identity as sample %d" % (w, identities[ident]))
        identities.setdefault(ident, j)
    return out


# ---- conservation -----------------------------------------------------------------------

def otlp_entries(req, k):
    """Yields (frames, labels, timestamp or None, value) of profile k's samples."""
    d = req.dictionary
    st = d.string_table

    def frame(li):
        loc = d.location_table[li]
        lines = []
        for ln in loc.lines:
            f = d.function_table[ln.function_index]
            lines.append((st[f.name_strindex], st[f.system_name_strindex],
                          st[f.filename_strindex], ln.line))
        return (tuple(lines), st[d.mapping_table[loc.mapping_index].filename_strindex],
                loc.address)

    for s in req.resource_profiles[0].scope_profiles[0].profiles[k].samples:
        frames = tuple(frame(li) for li in d.stack_table[s.stack_index].location_indices)
        labels = frozenset((st[a.key_strindex], value_of(a.value), st[a.unit_strindex])
                           for a in (d.attribute_table[i] for i in s.attribute_indices))
        if s.timestamps_unix_nano:
            for v, t in zip(s.values, s.timestamps_unix_nano):
                yield frames, labels, t, v
        else:
            for v in s.values:
                yield frames, labels, None, v


def pprof_entries(prof, k):
    """Yields (frames, labels, timestamp or None, value) of the pprof's value k."""
    st = prof.string_table
    maps = {m.id: st[m.filename] for m in prof.mapping}
    funcs = {f.id: (st[f.name], st[f.system_name], st[f.filename]) for f in prof.function}
    locs = {}
    for loc in prof.location:
        lines = tuple(funcs.get(ln.function_id, ("", "", "")) + (ln.line,) for ln in loc.line)
        locs[loc.id] = (lines, maps.get(loc.mapping_id, ""), loc.address)
    for s in prof.sample:
        if s.value[k] == 0:
            continue
        ts, labels = None, set()
        for lb in s.label:
            if st[lb.key] == TIMESTAMP_LABEL and lb.str == 0:
                ts = lb.num
            elif lb.str != 0:
                labels.add((st[lb.key], st[lb.str], ""))
            else:
                labels.add((st[lb.key], lb.num, st[lb.num_unit]))
        yield tuple(locs[i] for i in s.location_id), frozenset(labels), ts, s.value[k]


def describe(key):
    frames, labels = key[0], key[1]
    names = ";".join("|".join(ln[0] for ln in f[0]) or "?" for f in frames)
    return "[%s] %s%s" % (names, sorted(labels, key=repr),
                          "".join(" @%r" % x for x in key[2:]))


def diff_failures(got, want, what):
    keys = [k for k in set(got) | set(want) if got.get(k, 0) != want.get(k, 0)]
    out = ["%s: %s otlp %d pprof %d" % (what, describe(k), got.get(k, 0), want.get(k, 0))
           for k in sorted(keys, key=repr)[:5]]
    if len(keys) > 5:
        out.append("%s: %d more differences" % (what, len(keys) - 5))
    return out


def conservation_failures(req, prof):
    """The request against the pprof of the same export."""
    try:
        profiles = req.resource_profiles[0].scope_profiles[0].profiles
    except IndexError:
        return ["the request has no profiles"]
    try:
        return conservation_of(profiles, req, prof)
    except IndexError as e:  # request_failures reports what is out of range
        return ["conservation: an index is out of range (%s)" % e]


def conservation_of(profiles, req, prof):
    out = []
    st, pst = req.dictionary.string_table, prof.string_table

    def names(vt):
        return (st[vt.type_strindex], st[vt.unit_strindex])

    def pnames(vt):
        return (pst[vt.type], pst[vt.unit])

    want_types = [pnames(t) for t in prof.sample_type]
    got_types = [names(p.sample_type) for p in profiles]
    if got_types != want_types:
        return ["sample types %r, pprof %r" % (got_types, want_types)]
    for k, p in enumerate(profiles):
        what = "profile %d (%s)" % (k, got_types[k][0])
        for name, got, want in (
                ("time_unix_nano", p.time_unix_nano, prof.time_nanos),
                ("duration_nano", p.duration_nano, prof.duration_nanos),
                ("period_type", names(p.period_type), pnames(prof.period_type)),
                ("period", p.period, prof.period)):
            if got != want:
                out.append("%s: %s %r, pprof %r" % (what, name, got, want))
        sums = [collections.Counter(), collections.Counter()]
        stamped = [collections.Counter(), collections.Counter()]
        for side, entries in enumerate((otlp_entries(req, k), pprof_entries(prof, k))):
            for frames, labels, t, v in entries:
                sums[side][frames, labels] += v
                if t is not None:
                    stamped[side][frames, labels, t, v] += 1
        for c in sums:
            for key in [key for key, v in c.items() if v == 0]:
                del c[key]
        out += diff_failures(sums[0], sums[1], what + " sum")
        out += diff_failures(stamped[0], stamped[1], what + " timestamped count")
    return out


def export_time(req):
    try:
        return req.resource_profiles[0].scope_profiles[0].profiles[0].time_unix_nano
    except IndexError:
        return None


def pair_exports(requests, pprofs):
    """Pairs [(name, request)] with [(name, pprof)] by time; returns (pairs, failures),
    pairs as (request name, request, pprof name, pprof)."""
    by_time, out, pairs = {}, [], []
    for name, prof in pprofs:
        if prof.time_nanos in by_time:
            out.append("%s: same time_nanos as %s" % (name, by_time[prof.time_nanos][0]))
        by_time.setdefault(prof.time_nanos, (name, prof))
    used = set()
    for name, req in requests:
        t = export_time(req)
        if t not in by_time or t in used:
            out.append("%s: no pprof with time_nanos %r" % (name, t))
            continue
        used.add(t)
        pairs.append((name, req) + by_time[t])
    out += ["%s: no request with time_unix_nano %d" % (n, t)
            for t, (n, _) in sorted(by_time.items()) if t not in used]
    return pairs, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--expect", default="{}", help="JSON object of exact values")
    ap.add_argument("--pprof", action="append", default=[], help="a pprof file (repeatable)")
    ap.add_argument("requests", nargs="+", metavar="REQUEST_FILE")
    args = ap.parse_args(argv)
    expect = json.loads(args.expect)
    failures, reqs = [], []
    for path in args.requests:
        with open(path, "rb") as f:
            body = f.read()
        try:
            req = decode_request(body)
        except DecodeFailure as e:
            failures.append("%s: %s" % (path, e))
            continue
        reqs.append((path, req))
        failures += ["%s: %s" % (path, m) for m in request_failures(req, expect)]
    if args.pprof:
        pairs, unpaired = pair_exports(reqs, [(p, read_pprof(p)) for p in args.pprof])
        failures += unpaired
        for name, req, _, prof in pairs:
            failures += ["%s: %s" % (name, m) for m in conservation_failures(req, prof)]
    for m in failures:
        print("FAIL: " + m[:1500], file=sys.stderr)
    profiles = [p for _, r in reqs for rp in r.resource_profiles
                for sp in rp.scope_profiles for p in sp.profiles]
    tables = " ".join("%s=%d" % (t.split("_")[0], sum(len(getattr(r.dictionary, t))
                                                      for _, r in reqs)) for t in TABLES)
    print("check_otlp: %d requests, %d profiles, %d samples, tables %s, %d pprof, %d failures"
          % (len(args.requests), len(profiles), sum(len(p.samples) for p in profiles),
             tables, len(args.pprof), len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
