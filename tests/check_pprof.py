#!/usr/bin/env python3
"""check_pprof.py - checks pprofkit's output with independent readers (stdlib only).

It never reads anything the library computed except the profile itself. It takes:
  - the text that `protoc --decode=perftools.profiles.Profile profile.proto` printed, and
  - the text that `go tool pprof -raw` printed,
and compares both with what the profile must hold, worked out here from first principles:

  small  the profile that tools/ppk-gen-fixture.c writes as small.pb (the description
         below is written independently of that file: change both together);
  edge   edge.pb: negative and saturated values, top-of-address-space mapping, function
         and location identity, refused samples leaving no trace;
  reset  reset.pb: the window after a reset (old strings and endpoints gone, rule kept);
  w1     the first N samples of the reference workload W1 (steady), regenerated here with
         an own splitmix64 from the specification, aggregated here.

Usage: check_pprof.py small|edge|reset PROTOC_TEXT GO_RAW_TEXT
       check_pprof.py w1 PROTOC_TEXT GO_RAW_TEXT [N [START storm|steady]]
(with START and a variant, the profile is a ppk-demo export: its times are real ones)
Exit status 0 when every check passed; each failure is printed.
"""

import collections
import math
import re
import sys

START_NS = 1700000000000000000
DURATION_NS = 60000000000

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        if len(what) > 1500:
            what = what[:1500] + " ..."
        print("FAIL: " + what, file=sys.stderr)


def check_eq(actual, expected, what):
    check(actual == expected, "%s: got %r, expected %r" % (what, actual, expected))


# ---------------------------------------------------------------------------------------
# protoc text format -> nested dicts of lists

_ESC = {"n": b"\n", "t": b"\t", "r": b"\r", "a": b"\a", "b": b"\b", "f": b"\f",
        "v": b"\v", "\\": b"\\", "'": b"'", '"': b'"', "?": b"?"}


def unescape(s):
    """A C-escaped protoc string literal body -> bytes."""
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        i += 1
        c = s[i]
        if c in "01234567":
            j = i
            while j < len(s) and j < i + 3 and s[j] in "01234567":
                j += 1
            out.append(int(s[i:j], 8))
            i = j
        elif c == "x":
            j = i + 1
            while j < len(s) and j < i + 3 and s[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(s[i + 1:j], 16))
            i = j
        else:
            out += _ESC[c]
            i += 1
    return bytes(out)


def parse_text(text):
    root = collections.defaultdict(list)
    stack = [root]
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
            continue
        if line.endswith("{"):
            name = line[:-1].strip()
            msg = collections.defaultdict(list)
            stack[-1][name].append(msg)
            stack.append(msg)
            continue
        name, _, value = line.partition(":")
        value = value.strip()
        if value.startswith('"'):
            assert value.endswith('"'), "line %d: %s" % (lineno, line)
            v = unescape(value[1:-1])
        elif re.fullmatch(r"-?\d+", value):
            v = int(value)
        else:
            v = value
        stack[-1][name.strip()].append(v)
    assert len(stack) == 1, "unbalanced braces"
    return root


def one(msg, field, default=0):
    vals = msg.get(field, [])
    assert len(vals) <= 1, field
    return vals[0] if vals else default


# ---------------------------------------------------------------------------------------
# Structural checks on the decoded protobuf, then resolution to plain values


class Decoded:
    """The profile with ids resolved: samples as (frames, labels, values)."""

    def __init__(self, msg):
        self.msg = msg
        raw = msg.get("string_table", [])
        check(len(raw) > 0, "string_table is not empty")
        check(len(raw) > 0 and raw[0] == b"", "string_table[0] is the empty string")
        self.strings = []
        for i, b in enumerate(raw):
            try:
                self.strings.append(b.decode("utf-8", errors="strict"))
            except UnicodeDecodeError:
                check(False, "string_table[%d] is valid UTF-8: %r" % (i, b))
                self.strings.append(b.decode("utf-8", errors="replace"))
        dups = [s for s, c in collections.Counter(self.strings).items() if c > 1]
        check(not dups, "string_table has no duplicates: %r" % dups[:5])

        def table(field):
            items = msg.get(field, [])
            for i, it in enumerate(items):
                check_eq(one(it, "id"), i + 1, "%s[%d].id is index + 1" % (field, i))
            return {one(it, "id"): it for it in items}

        self.functions = table("function")
        self.mappings = table("mapping")
        self.locations = table("location")

        for fid, f in self.functions.items():
            for fld in ("name", "system_name", "filename"):
                self.s(one(f, fld), "function %d %s" % (fid, fld))
        keys = [self.func(fid) for fid in self.functions]
        check(len(set(keys)) == len(keys), "functions are deduplicated")
        for mid, m in self.mappings.items():
            for fld in ("filename", "build_id"):
                self.s(one(m, fld), "mapping %d %s" % (mid, fld))
        for lid, loc in self.locations.items():
            mid = one(loc, "mapping_id")
            check(mid == 0 or mid in self.mappings,
                  "location %d mapping_id %d exists" % (lid, mid))
            for ln in loc.get("line", []):
                fid = one(ln, "function_id")
                check(fid in self.functions, "location %d function_id %d exists" % (lid, fid))
        lkeys = [self.loc(lid) for lid in self.locations]
        check(len(set(lkeys)) == len(lkeys), "locations are deduplicated")

        self.sample_types = [(self.s(one(t, "type")), self.s(one(t, "unit")))
                             for t in msg.get("sample_type", [])]
        pts = msg.get("period_type", [])
        self.period_type = ((self.s(one(pts[0], "type")), self.s(one(pts[0], "unit")))
                            if pts else None)
        self.period = one(msg, "period")
        self.time_nanos = one(msg, "time_nanos")
        self.duration_nanos = one(msg, "duration_nanos")
        for fld in ("drop_frames", "keep_frames", "default_sample_type"):
            self.s(one(msg, fld), fld)
        for c in msg.get("comment", []):
            self.s(c, "comment")

        self.samples = []
        for i, smp in enumerate(msg.get("sample", [])):
            lids = smp.get("location_id", [])
            for lid in lids:
                check(lid in self.locations, "sample %d location_id %d exists" % (i, lid))
            frames = tuple(self.loc(lid) for lid in lids)
            values = list(smp.get("value", []))
            check_eq(len(values), len(self.sample_types), "sample %d value count" % i)
            labels = []
            for lb in smp.get("label", []):
                key = self.s(one(lb, "key"), "label key")
                check(key != "", "sample %d label key is not empty" % i)
                sv, num = one(lb, "str"), one(lb, "num")
                unit = self.s(one(lb, "num_unit"), "num_unit")
                if sv:
                    check(num == 0 and unit == "", "label %r has str and num" % key)
                    labels.append((key, "s", self.s(sv, "label str")))
                else:
                    labels.append((key, "n", num, unit))
            lkeys = [lb[0] for lb in labels]
            check(len(set(lkeys)) == len(lkeys), "sample %d has unique label keys" % i)
            self.samples.append((frames, frozenset(labels), values))

    def s(self, idx, what="string"):
        ok = isinstance(idx, int) and 0 <= idx < len(self.strings)
        check(ok, "%s: string index %r exists" % (what, idx))
        return self.strings[idx] if ok else "<bad %r>" % (idx,)

    def func(self, fid):
        f = self.functions.get(fid)
        if f is None:
            return None
        return (self.s(one(f, "name")), self.s(one(f, "system_name")),
                self.s(one(f, "filename")), one(f, "start_line"))

    def mapping(self, mid):
        m = self.mappings.get(mid)
        if m is None:
            return None
        return (one(m, "memory_start"), one(m, "memory_limit"), one(m, "file_offset"),
                self.s(one(m, "filename")), self.s(one(m, "build_id")))

    def loc(self, lid):
        loc = self.locations.get(lid)
        if loc is None:
            return None
        lines = tuple(self.func(one(ln, "function_id")) + (one(ln, "line"),)
                      for ln in loc.get("line", []))
        return (one(loc, "address"), self.mapping(one(loc, "mapping_id")), lines)


# ---------------------------------------------------------------------------------------
# go tool pprof -raw output


def parse_go_raw(text):
    """-> dict with period_type, period, sample_types and samples as
    (tuple of leaf-first function names, frozenset of label strings, values)."""
    lines = text.splitlines()
    out = {"samples": [], "locations": {}}
    i = 0
    while i < len(lines) and lines[i] != "Samples:":
        ln = lines[i]
        if ln.startswith("PeriodType: "):
            out["period_type"] = tuple(ln[len("PeriodType: "):].split(" "))
        elif ln.startswith("Period: "):
            out["period"] = int(ln[len("Period: "):])
        i += 1
    check(i < len(lines), "go pprof -raw printed a Samples: section")
    i += 1
    out["sample_types"] = [tuple(t.split("/")) for t in lines[i].split()]
    i += 1
    raw_samples = []
    while i < len(lines) and lines[i] != "Locations":
        ln = lines[i]
        if ln.startswith("                ") and raw_samples:
            raw_samples[-1][2].append(ln.strip())
        else:
            vals, _, locs = ln.partition(":")
            raw_samples.append(([int(v) for v in vals.split()],
                                [int(x) for x in locs.split()], []))
        i += 1
    i += 1
    cur = None
    while i < len(lines) and lines[i] != "Mappings":
        ln = lines[i]
        m = re.match(r"\s*(\d+): (0x[0-9a-f]+) (?:M=\d+ )?(.*)$", ln)
        if m:
            cur = int(m.group(1))
            out["locations"][cur] = []
            rest = m.group(3)
        else:
            rest = ln.strip()
        if rest:
            fm = re.match(r"(.*) (\S*):(-?\d+) s=(-?\d+)", rest)
            out["locations"][cur].append(fm.group(1) if fm else rest)
        i += 1
    for vals, locs, label_lines in raw_samples:
        labels = set()
        for ll in label_lines:
            for km in re.finditer(r"(?:^| )(.+?):\[(.*?)\](?= |$)", ll):
                labels.add("%s=%s" % (km.group(1), km.group(2)))
        names = tuple(out["locations"].get(l, ["?"])[0] if out["locations"].get(l) else ""
                      for l in locs)
        out["samples"].append((names, frozenset(labels), vals))
    return out


def go_label(lb):
    if lb[1] == "s":
        return "%s=%s" % (lb[0], lb[2])
    return "%s=%d%s" % (lb[0], lb[2], (" " + lb[3]) if lb[3] else "")


# ---------------------------------------------------------------------------------------
# Comparison of sample multisets


def values_match(actual, expected):
    """expected values may be floats (upscaled): any rounding of them is accepted."""
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected):
        if isinstance(e, float):
            if abs(a - e) > 1.0 + 1e-9 * abs(e):
                return False
        elif a != e:
            return False
    return True


def compare_samples(actual, expected, what, frame_match=None):
    """actual/expected: lists of (frames, labels, values). Frames compare with
    frame_match(actual_frames, expected_frames) when given, else by equality."""
    check_eq(len(actual), len(expected), "%s: number of samples" % what)
    remaining = list(actual)
    for ef, el, ev in expected:
        found = None
        for idx, (af, al, av) in enumerate(remaining):
            fm = frame_match(af, ef) if frame_match else af == ef
            if fm and al == el and values_match(av, ev):
                found = idx
                break
        if found is None:
            near = [s for s in remaining if s[1] == el]
            check(False, "%s: expected sample not found:\n  frames %r\n  labels %r\n"
                  "  values %r\n  candidates with these labels: %r"
                  % (what, ef, sorted(el), ev, near[:3]))
        else:
            remaining.pop(found)
    for s in remaining:
        check(False, "%s: unexpected sample %r" % (what, s))


# ---------------------------------------------------------------------------------------
# The small profile


def poisson(values, sum_idx, count_idx, distance, idxs):
    count = values[count_idx]
    if count == 0:
        return list(values)
    avg = values[sum_idx] / count
    scale = 1.0 / (1.0 - math.exp(-avg / distance))
    return [v * scale if i in idxs else v for i, v in enumerate(values)]


def proportional(values, sampled, real, idxs):
    return [v * real / sampled if i in idxs else v for i, v in enumerate(values)]


def small_expected():
    mp = (0x400000, 0x500000, 0x1000, "/usr/bin/app", "deadbeefcafe0123")
    FA = (0x401234, mp, (("alloc_buffer", "_Z12alloc_bufferm", "/src/buffer.c", 100, 123),))
    FB = (0x402000, mp, (("parse_request", "", "/src/server.c", 40, 45),))
    FC = (0, None, (("main", "", "/src/main.c", 0, 7),))
    FD = (0, None, (("handler", "", "/srv/app.py", 0, 20),))
    FN = (0x403abc, mp, ())
    OMIT = "<3 frames omitted>"

    def S(k, v):
        return (k, "s", v)

    def N(k, v, unit=""):
        return (k, "n", v, unit)

    def scale(labels, raw):
        # Rule 1 (first added): exception type=ValueError, values 0 and 1, x 10/2.
        if S("exception type", "ValueError") in labels:
            return proportional(raw, 2, 10, {0, 1})
        # Rule 2: every sample, Poisson, sum = 1 (bytes), count = 0, 512 KiB.
        return poisson(raw, 1, 0, 524288, {0, 1})

    thread = frozenset([S("thread name", "main"), N("thread id", 7),
                        N("request size", 4096, "bytes")])
    ve = frozenset([S("exception type", "ValueError")])
    ts = frozenset(ve | {N("end_timestamp_ns", 1700000000123456789)})
    span = frozenset([N("local root span id", 12345), N("span id", 999),
                      S("trace endpoint", "GET /users/:id")])
    span2 = frozenset([N("local root span id", 12345), S("trace endpoint", "custom")])
    bad = frozenset([S("task name", "bad\ufffd\ufffdutf8\ufffd")])
    lng = frozenset([S("comment", "x" + "\u00e9" * 31)])
    ke = frozenset([S("exception type", "KeyError")])
    samples = [
        ((FA, FB, FC), thread, [1 + 2 + 1, 1000 + 3000 + 500]),  # three orders, one sample
        ((FA, FB, FC), frozenset(), [1, 100]),
        ((FD, FC), ve, [2, 64]),
        ((FD, FC), ts, [1, 32]),
        ((FD, FC), ts, [1, 32]),  # same timestamp, still its own sample
        ((FN, FB, FC), span, [1, 2048]),
        ((FN, FB, FC), span2, [1, 1024]),
        ((FD, FC), bad, [1, 10]),
        ((FD, FC), lng, [1, 20]),
        ((FD, FA, FB, OMIT), frozenset(), [1, 30]),
        ((FA, FB, FC), ke, [0, 777]),  # zero count: Poisson does not scale
    ]
    return [(f, l, scale(l, v)) for f, l, v in samples]


def frames_match(actual, expected):
    """Exact, except the synthetic omitted-frames frame, checked by its function name."""
    if len(actual) != len(expected):
        return False
    for a, e in zip(actual, expected):
        if isinstance(e, str):
            if a is None or len(a[2]) != 1 or a[2][0][0] != e:
                return False
        elif a != e:
            return False
    return True


def check_header(d, sample_types, period_type, period):
    check_eq(d.sample_types, sample_types, "sample_type")
    check_eq(d.period_type, period_type, "period_type")
    check_eq(d.period, period, "period")
    check_eq(d.time_nanos, START_NS, "time_nanos")
    check_eq(d.duration_nanos, DURATION_NS, "duration_nanos")


def check_go_header(g, sample_types, period_type, period):
    check_eq(g.get("sample_types"), sample_types, "go pprof: sample types")
    check_eq(g.get("period_type"), period_type, "go pprof: period type")
    check_eq(g.get("period"), period, "go pprof: period")


def go_expected(expected):
    """What go tool pprof shows: function names only, and samples with the same stack
    and labels merged (it merges the timestamped ones too)."""
    merged = collections.OrderedDict()
    for f, l, v in expected:
        names = tuple(fr if isinstance(fr, str) else (fr[2][0][0] if fr[2] else "")
                      for fr in f)
        key = (names, frozenset(go_label(x) for x in l))
        if key in merged:
            merged[key] = [a + b for a, b in zip(merged[key], v)]
        else:
            merged[key] = list(v)
    return [(f, l, v) for (f, l), v in merged.items()]


def check_small(proto_text, go_text):
    d = Decoded(parse_text(proto_text))
    st = [("alloc-samples", "count"), ("alloc-space", "bytes")]
    check_header(d, st, ("space", "bytes"), 524288)
    exp = small_expected()
    compare_samples(d.samples, exp, "protoc", frames_match)

    # The omitted-frames frame is the root (last), and a location of its own.
    deep = [s for s in d.samples if len(s[0]) == 4 and s[0][3] and s[0][3][2]
            and s[0][3][2][0][0].endswith("frames omitted>")]
    check_eq(len(deep), 1, "one sample ends in an omitted-frames frame")
    check(not any(s == "GET /old" for _, ls, _ in d.samples for l in ls for s in l),
          "the replaced endpoint is not used")
    check(not any("Z" * 5 in s for s in d.strings), "no string shows the caller's later "
          "overwrite (G1)")
    check(len(d.mappings) == 1, "one mapping, got %d" % len(d.mappings))

    g = parse_go_raw(go_text)
    check_go_header(g, st, ("space", "bytes"), 524288)
    compare_samples(g["samples"], go_expected(exp), "go pprof -raw")


# ---------------------------------------------------------------------------------------
# edge.pb and reset.pb


def check_no_strings(d, forbidden, what):
    for f in forbidden:
        check(not any(f in s for s in d.strings), "%s: %r is not in the string table"
              % (what, f))


def check_edge(proto_text, go_text):
    d = Decoded(parse_text(proto_text))
    check_eq(d.sample_types, [("samples", "count")], "sample_type")
    check(d.period_type in (None, ("", "")), "no period type: %r" % (d.period_type,))
    check_eq(d.period, 0, "period")
    check_eq(d.time_nanos, START_NS, "time_nanos")
    check_eq(d.duration_nanos, DURATION_NS, "duration_nanos")
    hi = (0xffffffffff000000, 0xffffffffffffffff, 0, "[vdso]", "")
    G10 = (0, None, (("g", "", "g.py", 1, 10),))
    G11 = (0, None, (("g", "", "g.py", 1, 11),))
    DA = (0, None, (("dup", "", "a.py", 0, 1),))
    DB = (0, None, (("dup", "", "b.py", 0, 1),))
    TOP = (0xfffffffffffffff0, hi, (("vdso_fn", "", "", 0, 0),))
    temp = frozenset([("temperature", "n", -42, "celsius")])
    exp = [((G10, G11), frozenset(), [5]),
           ((DA, DB), frozenset(), [-7]),
           ((TOP,), temp, [2**63 - 1])]  # (2^63 - 2) + 10 saturates
    compare_samples(d.samples, exp, "protoc")
    check_eq(len(d.functions), 4, "functions (g, dup a.py, dup b.py, vdso_fn)")
    check_eq(len(d.locations), 5, "locations (two lines of g are two locations)")
    check_no_strings(d, ["refused"], "refused samples leave no trace")
    g = parse_go_raw(go_text)
    compare_samples(g["samples"], go_expected(exp), "go pprof -raw")


def check_reset(proto_text, go_text):
    d = Decoded(parse_text(proto_text))
    check_header(d, [("samples", "count")], ("cpu", "nanoseconds"), 1000)
    NEW = (0, None, (("new_fn", "", "new.py", 0, 2),))
    span = frozenset([("local root span id", "n", 5, "")])  # endpoint cleared by reset
    exp = [((NEW,), span, [7 * 3])]  # the x3 rule survives the reset
    compare_samples(d.samples, exp, "protoc")
    check_no_strings(d, ["old", "before-reset"], "the previous window is gone")
    g = parse_go_raw(go_text)
    compare_samples(g["samples"], go_expected(exp), "go pprof -raw")


# ---------------------------------------------------------------------------------------
# W1, regenerated from its specification


class SplitMix64:
    def __init__(self, seed):
        self.s = seed

    def next(self):
        m = (1 << 64) - 1
        self.s = (self.s + 0x9E3779B97F4A7C15) & m
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        return z ^ (z >> 31)


def w1_expected(n, storm=False, start=0):
    """The samples start .. start+n-1 of W1, aggregated."""
    rng = SplitMix64(42)
    F, S = 2000, 5000
    funcs = [("pkg%d.mod%d.handler_%d" % (i % 50, i % 200, i),
              "/srv/app/pkg%d/mod%d.py" % (i % 50, i % 200), 1 + (i * 7) % 500)
             for i in range(F)]
    stacks = []
    for _ in range(S):
        d = 8 + rng.next() % 57
        stacks.append(tuple(rng.next() % F for _ in range(d)))
    agg = collections.OrderedDict()
    for _ in range(start):
        rng.next()
    for k in range(start, start + n):
        st = stacks[rng.next() % S]
        t = k % 8
        labels = frozenset([("thread id", "n", 1000 + t, ""),
                            ("thread name", "s", "Thread-%d" % t),
                            ("task name", "s", "Task-%d" % (k if storm else k % 100))])
        key = (st, labels)
        v = agg.setdefault(key, [0, 0])
        v[0] += 10000000
        v[1] += 10000000
    samples = []
    for (st, labels), v in agg.items():
        frames = tuple((0, None, ((funcs[f][0], "", funcs[f][1], 0, funcs[f][2]),))
                       for f in st)
        samples.append((frames, labels, v))
    return samples


def thread_totals(samples, key):
    tot = collections.Counter()
    for _, labels, v in samples:
        for lb in labels:
            if lb[0] == key:
                tot[lb[2]] += v[0]
    return dict(tot)


def check_w1(proto_text, go_text, n, start=0, storm=False, fixed_time=True):
    """Samples start .. start+n-1 of W1. fixed_time: the fixture's start and end times;
    otherwise (a ppk-demo export) real ones."""
    d = Decoded(parse_text(proto_text))
    st = [("cpu-time", "nanoseconds"), ("wall-time", "nanoseconds")]
    if fixed_time:
        check_header(d, st, ("wall-time", "nanoseconds"), 10000000)
    else:
        check_eq(d.sample_types, st, "sample_type")
        check_eq(d.period_type, ("wall-time", "nanoseconds"), "period_type")
        check_eq(d.period, 10000000, "period")
        check(d.time_nanos > 1600000000 * 10**9, "time_nanos is a real time: %d"
              % d.time_nanos)
        check(d.duration_nanos > 0, "duration_nanos > 0: %d" % d.duration_nanos)
    exp = w1_expected(n, storm, start)
    print("w1: samples %d..%d (%s) aggregated into %d (python)"
          % (start, start + n - 1, "storm" if storm else "steady", len(exp)))

    # Per-thread totals first: the headline figure.
    want = {1000 + t: 10000000 * len([k for k in range(start, start + n) if k % 8 == t])
            for t in range(8)}
    check_eq(thread_totals(exp, "thread id"), want, "python's own per-thread totals")
    check_eq(thread_totals(d.samples, "thread id"), want, "protoc: cpu-time per thread id")
    check_eq(sum(v[1] for _, _, v in d.samples), 10000000 * n, "protoc: total wall-time")

    # Then every aggregated sample, exactly (a dict: 20,000 samples).
    def index(samples):
        idx = collections.defaultdict(list)
        for f, l, v in samples:
            idx[(f, l)].append(v)
        return idx

    a_idx, e_idx = index(d.samples), index(exp)
    check_eq(len(d.samples), len(exp), "protoc: number of aggregated samples")
    missing = [k for k in e_idx if k not in a_idx]
    extra = [k for k in a_idx if k not in e_idx]
    check(not missing, "protoc: %d expected samples missing, e.g. %r"
          % (len(missing), missing[:1]))
    check(not extra, "protoc: %d unexpected samples, e.g. %r" % (len(extra), extra[:1]))
    wrong = [k for k in e_idx if k in a_idx and sorted(a_idx[k]) != sorted(e_idx[k])]
    check(not wrong, "protoc: %d samples with wrong values, e.g. %r -> %r / %r"
          % (len(wrong), wrong[:1], [a_idx[k] for k in wrong[:1]],
             [e_idx[k] for k in wrong[:1]]))
    check(len(d.functions) <= 2000, "at most 2000 functions, got %d" % len(d.functions))

    g = parse_go_raw(go_text)
    check_go_header(g, st, ("wall-time", "nanoseconds"), 10000000)
    gtot = collections.Counter()
    for _, labels, v in g["samples"]:
        for lb in labels:
            if lb.startswith("thread id="):
                gtot[int(lb[len("thread id="):])] += v[0]
    check_eq(dict(gtot), want, "go pprof -raw: cpu-time per thread id")
    ga = collections.Counter((f, l) for f, l, _ in g["samples"])
    ge = collections.Counter((f, l) for f, l, _ in go_expected(exp))
    check(ga == ge, "go pprof -raw: the same samples (%d differ)"
          % sum(((ga - ge) + (ge - ga)).values()))


def main(argv):
    if len(argv) < 4 or argv[1] not in ("small", "edge", "reset", "w1"):
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[2], encoding="utf-8", errors="strict") as f:
        proto_text = f.read()
    with open(argv[3], encoding="utf-8", errors="replace") as f:
        go_text = f.read()
    if argv[1] == "small":
        check_small(proto_text, go_text)
    elif argv[1] == "edge":
        check_edge(proto_text, go_text)
    elif argv[1] == "reset":
        check_reset(proto_text, go_text)
    else:
        check_w1(proto_text, go_text, int(argv[4]) if len(argv) > 4 else 20000,
                 int(argv[5]) if len(argv) > 5 else 0,
                 len(argv) > 6 and argv[6] == "storm", len(argv) <= 6)
    if failures:
        print("%s: %d check(s) failed" % (argv[1], len(failures)), file=sys.stderr)
        return 1
    print("%s: all checks passed" % argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
