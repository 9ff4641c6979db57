#!/usr/bin/env python3
"""check_conservation.py - do exported profiles hold every flushed sample exactly once?

An independent reader (stdlib only): its own protobuf wire-format decoder for the parts
of profile.proto it needs (Profile.sample_type=1, sample=2, string_table=6; ValueType
type=1 unit=2; Sample location_id=1, value=2 (packed or not), label=3; Label key=1 str=2
num=3 num_unit=4). A few files are cross-checked with protoc --decode when protoc and
profile.proto are installed.

Usage:
  check_conservation.py DIR
      DIR/manifest.json (written by tests/test_conservation.c or tests/test_fork.c) lists
      the export files in export order, the sample types, and per producer thread the
      sums of each value type over the flushes that returned 0 and the refused sample
      indices. Every sample carries a numeric label (thread_label) and a string label
      "task name" = task_format with {thread} and {k}. Checks: each file decodes; the
      sample types are as listed; per thread and value type the sums over all files
      equal the flushed sums; the set of task names is exactly the accepted ones, each in
      exactly one file (no duplicate, none missing, none refused); a thread's samples
      appear in export order (k < k' never in a later file than k').
  check_conservation.py --tally [--unique-label KEY | --count-label KEY]
                        [--expect-samples N] FILE...
      Decodes every FILE and prints one JSON line: files, samples (pprof Sample
      messages), sums per sample type, distinct values of KEY. With --unique-label, a
      KEY value seen in two samples is a failure (--count-label only counts); with
      --expect-samples, the sum of the first sample type over all files must equal N.
Exit status 0 when every check passed; failures are printed.
"""

import gzip
import json
import os
import re
import shutil
import subprocess
import sys

PROTO = os.environ.get(
    "PPK_PROFILE_PROTO",
    "/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto")

failures = []


def fail(msg):
    failures.append(msg)
    if len(failures) <= 20:
        print("FAIL: " + msg, file=sys.stderr)


# ---------------------------------------------------------------------------------------
# protobuf wire format


def varint(buf, i):
    shift = 0
    result = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift >= 64:
            raise ValueError("varint too long")


def fields(buf):
    """Yields (field number, wire type, value): an int for varints, bytes for wt 2."""
    i = 0
    n = len(buf)
    while i < n:
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 2:
            ln, i = varint(buf, i)
            if i + ln > n:
                raise ValueError("truncated field %d" % num)
            v = buf[i:i + ln]
            i += ln
        elif wt == 1:
            v = int.from_bytes(buf[i:i + 8], "little")
            i += 8
        elif wt == 5:
            v = int.from_bytes(buf[i:i + 4], "little")
            i += 4
        else:
            raise ValueError("wire type %d" % wt)
        if i > n:
            raise ValueError("truncated")
        yield num, wt, v


def ints(wt, v, signed=True):
    """A repeated integer field's values, packed or not."""
    if wt == 0:
        out = [v]
    else:
        out = []
        i = 0
        while i < len(v):
            x, i = varint(v, i)
            out.append(x)
    if signed:
        out = [x - (1 << 64) if x >= (1 << 63) else x for x in out]
    return out


def decode_profile(raw):
    """-> dict(strings, sample_types [(type, unit)], samples [(values, labels)]);
    labels are a list of (key, str or None, num)."""
    strings = []
    sample_types = []
    samples = []
    for num, wt, v in fields(raw):
        if num == 6:
            strings.append(bytes(v).decode("utf-8"))  # pprof strings must be UTF-8
        elif num == 1:
            t = u = 0
            for n2, _, v2 in fields(v):
                if n2 == 1:
                    t = v2
                elif n2 == 2:
                    u = v2
            sample_types.append((t, u))
        elif num == 2:
            values = []
            labels = []
            nloc = 0
            for n2, wt2, v2 in fields(v):
                if n2 == 1:
                    nloc += len(ints(wt2, v2, False))
                elif n2 == 2:
                    values += ints(wt2, v2)
                elif n2 == 3:
                    key = s = unit = 0
                    numv = 0
                    for n3, _, v3 in fields(v2):
                        if n3 == 1:
                            key = v3
                        elif n3 == 2:
                            s = v3
                        elif n3 == 3:
                            numv = ints(0, v3)[0]
                        elif n3 == 4:
                            unit = v3
                    labels.append((key, s, numv, unit))
            samples.append((values, labels, nloc))
    if not strings or strings[0] != "":
        raise ValueError("string_table[0] is not the empty string")

    def s(i):
        if not 0 <= i < len(strings):
            raise ValueError("string index %d out of range (%d strings)" % (i, len(strings)))
        return strings[i]

    out_samples = []
    for values, labels, nloc in samples:
        if len(values) != len(sample_types):
            raise ValueError("a sample has %d values for %d sample types"
                             % (len(values), len(sample_types)))
        lab = []
        for key, sv, numv, unit in labels:
            s(unit)
            lab.append((s(key), s(sv) if sv else None, numv))
        out_samples.append((values, lab, nloc))
    return {
        "strings": strings,
        "sample_types": [(s(t), s(u)) for t, u in sample_types],
        "samples": out_samples,
    }


def read_raw(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return data


# ---------------------------------------------------------------------------------------
# cross-check with protoc


def protoc_check(path, ours):
    """Decodes `path` with protoc and compares sample count, value sums, strings."""
    raw = read_raw(path)
    proc = subprocess.run(
        ["protoc", "--decode=perftools.profiles.Profile", "-I", os.path.dirname(PROTO),
         os.path.basename(PROTO)], input=raw, capture_output=True, check=False)
    if proc.returncode != 0:
        fail("protoc rejected %s: %s" % (path, proc.stderr.decode(errors="replace")[:500]))
        return
    text = proc.stdout.decode("utf-8", errors="replace")
    n_samples = 0
    sums = [0] * len(ours["sample_types"])
    idx = 0
    n_strings = 0
    for line in text.splitlines():
        st = line.strip()
        if line.startswith("sample {"):
            n_samples += 1
            idx = 0
        elif st.startswith("value: ") and line.startswith("  value"):
            if idx < len(sums):
                sums[idx] += int(st.split()[1])
            idx += 1
        elif line.startswith("string_table:"):
            n_strings += 1
    our_sums = [sum(s[0][i] for s in ours["samples"]) for i in range(len(sums))]
    if (n_samples, sums, n_strings) != (len(ours["samples"]), our_sums, len(ours["strings"])):
        fail("%s: protoc sees %d samples, sums %s, %d strings; this reader %d, %s, %d"
             % (path, n_samples, sums, n_strings, len(ours["samples"]), our_sums,
                len(ours["strings"])))


def protoc_available():
    return shutil.which("protoc") is not None and os.path.exists(PROTO)


# ---------------------------------------------------------------------------------------
# manifest mode


def check_manifest(d):
    with open(os.path.join(d, "manifest.json")) as f:
        m = json.load(f)
    threads = m["threads"]
    n = m["samples_per_thread"]
    types = [tuple(t) for t in m["sample_types"]]
    thread_label = m.get("thread_label", "thread id")
    pattern = re.compile("^" + re.escape(m["task_format"])
                         .replace(r"\{thread\}", r"(\d+)").replace(r"\{k\}", r"(\d+)") + "$")
    files = m["files"]
    per = {p["thread"]: p for p in m["per_thread"]}

    # Every file of the directory that looks like an export must be listed.
    listed = set(files)
    for name in os.listdir(d):
        if name != "manifest.json" and name not in listed:
            fail("%s: a file that no export wrote" % name)

    where = {}  # (thread, k) -> file index
    sums = {t: [0] * len(types) for t in range(threads)}
    decoded = []
    for i, name in enumerate(files):
        path = os.path.join(d, name)
        try:
            prof = decode_profile(read_raw(path))
        except (ValueError, OSError, EOFError, UnicodeDecodeError) as e:
            fail("%s: cannot decode: %s" % (name, e))
            continue
        decoded.append((path, prof))
        if prof["sample_types"] != types:
            fail("%s: sample types %s, expected %s" % (name, prof["sample_types"], types))
            continue
        for values, labels, _ in prof["samples"]:
            lab = {}
            for key, sv, numv in labels:
                if key in lab:
                    fail("%s: label %r twice in one sample" % (name, key))
                lab[key] = sv if sv is not None else numv
            t = lab.get(thread_label)
            task = lab.get("task name")
            mt = pattern.match(task) if isinstance(task, str) else None
            if mt is None or not isinstance(t, int) or int(mt.group(1)) != t or t not in sums:
                fail("%s: unexpected sample: labels %r" % (name, lab))
                continue
            k = int(mt.group(2))
            if not 0 <= k < n:
                fail("%s: task index out of range: %s" % (name, task))
                continue
            if (t, k) in where:
                fail("%s: %s already in %s" % (name, task, files[where[(t, k)]]))
                continue
            where[(t, k)] = i
            for j, v in enumerate(values):
                sums[t][j] += v

    for t in range(threads):
        p = per[t]
        refused = set(p["refused"])
        got = [k for (tt, k) in where if tt == t]
        if len(got) != p["accepted"]:
            fail("thread %d: %d samples exported, %d flushes accepted"
                 % (t, len(got), p["accepted"]))
        for k in range(n):
            if k in refused and (t, k) in where:
                fail("thread %d: refused sample %d is exported" % (t, k))
            if k not in refused and (t, k) not in where:
                fail("thread %d: sample %d was flushed and is in no export" % (t, k))
        if sums[t] != p["sums"]:
            fail("thread %d: exported sums %s, flushed sums %s" % (t, sums[t], p["sums"]))
        last = -1
        for k in sorted(got):
            if where[(t, k)] < last:
                fail("thread %d: sample %d is in an earlier export than a sample before it"
                     % (t, k))
                break
            last = where[(t, k)]

    if protoc_available() and decoded:
        nonempty = [x for x in decoded if x[1]["samples"]]
        picks = {id(x): x for x in [decoded[0], decoded[-1]] + nonempty[:1] + nonempty[-1:]
                 + nonempty[len(nonempty) // 2:len(nonempty) // 2 + 1]}
        for path, prof in picks.values():
            protoc_check(path, prof)
        checked = len(picks)
    else:
        checked = 0
        print("check_conservation.py: protoc or profile.proto missing: no cross-check")

    total = sum(p["accepted"] for p in per.values())
    if not failures:
        print("check_conservation.py: %d files, %d samples on %d threads, each exactly once; "
              "sums conserved; %d files cross-checked with protoc"
              % (len(files), total, threads, checked))


# ---------------------------------------------------------------------------------------
# tally mode


def tally(args):
    unique = None
    count_only = False
    expect = None
    paths = []
    i = 0
    while i < len(args):
        if args[i] in ("--unique-label", "--count-label"):
            unique = args[i + 1]
            count_only = args[i] == "--count-label"
            i += 2
        elif args[i] == "--expect-samples":
            expect = int(args[i + 1])
            i += 2
        else:
            paths.append(args[i])
            i += 1
    seen = set()
    dups = 0
    n_samples = 0
    sums = None
    types = None
    decoded = []
    for path in paths:
        try:
            prof = decode_profile(read_raw(path))
        except (ValueError, OSError, EOFError, UnicodeDecodeError) as e:
            fail("%s: cannot decode: %s" % (path, e))
            continue
        decoded.append((path, prof))
        if types is None:
            types = prof["sample_types"]
            sums = [0] * len(types)
        elif prof["sample_types"] != types:
            fail("%s: sample types %s differ from %s" % (path, prof["sample_types"], types))
            continue
        for values, labels, _ in prof["samples"]:
            n_samples += 1
            for j, v in enumerate(values):
                sums[j] += v
            if unique is not None:
                for key, sv, numv in labels:
                    if key == unique:
                        val = sv if sv is not None else numv
                        if val in seen and not count_only:
                            dups += 1
                            if dups <= 5:
                                fail("%s: %s %r in two samples" % (path, unique, val))
                        seen.add(val)
    if expect is not None and (sums is None or sums[0] != expect):
        fail("the first sample type sums to %s over %d files, expected %d"
             % (sums[0] if sums else None, len(paths), expect))
    if protoc_available() and decoded:
        for path, prof in {id(x): x for x in (decoded[0], decoded[-1])}.values():
            protoc_check(path, prof)
    print(json.dumps({"files": len(paths), "samples": n_samples,
                      "sample_types": types, "sums": sums,
                      "distinct": len(seen) if unique is not None else None,
                      "duplicates": dups}))


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--tally":
        tally(sys.argv[2:])
    elif len(sys.argv) == 2:
        check_manifest(sys.argv[1])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if failures:
        print("check_conservation.py: %d failure(s)" % len(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
