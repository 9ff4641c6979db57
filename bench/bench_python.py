"""bench_python.py - the per-sample cost of the Python binding on the W1 workload.

W1 (the shared benchmark notes; bench/w1.h is the C version) generated in Python with
the same splitmix64 draws: 2,000 functions, 5,000 stacks of 8-64 frames, per sample a
stack and the labels "thread id" (numeric), "thread name" and "task name" ("Task-{k}"
in the storm variant, "Task-{k % 100}" in the steady one), values cpu-time and
wall-time of 10 ms; an export (zstd-1) every 100,000 samples. Two ways to add a sample:

  record   Sample.record(frames, values, labels): one call per sample; the frames are
           the stack's list of (name, filename, line) tuples, the labels a dict.
  builder  Sample.start(), push_frame() per frame (a Python loop over the stack),
           push_label() x3, set_value() x2, flush(): what a profiler written in Python
           that builds samples call by call pays.

Figures per (variant, api), on the interpreter that runs this file:
  loop ns/sample  the add loop's time (exports excluded) / samples: it includes making
                  the sample's Python objects (the label dict or the task-name string);
  net ns/sample   the same minus the time of the loop that makes those objects without
                  calling pprofkit (measured just before), i.e. the binding's own cost.
The stacks' frame tuples are made once, before the loops (a profiler has them from its
frame walk); the random stack choices are drawn before too.

The run checks its own work: every export is decoded with protoc (python/tests/support.py,
an independent reader) and the sum of each value type over all exports must equal
samples x 10 ms, and the exports' sample counts must add up to the samples added, with
no degradation counted; "checked" says whether that held. Nothing is asserted about time.

Output: a table, and the rows (variant, api, python, ns_per_sample, net_ns_per_sample,
samples, exports, checked, ...) written to bench/results/python.json, merged with the
rows of other interpreters already there (a row is replaced by a run of the same
variant, api and Python version).

Usage: PYTHONPATH=build/python/py3.11.2 python3 bench/bench_python.py
           [--samples N] [--variant steady|storm|both] [--api record|builder|both]
           [--no-check] [--json PATH]
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from array import array

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import pprofkit  # noqa: E402

MASK = (1 << 64) - 1
FUNCTIONS = 2000
STACKS = 5000
WINDOW = 100_000
VALUE = 10_000_000


class SplitMix64:
    def __init__(self, seed=42):
        self.s = seed

    def next(self):
        self.s = (self.s + 0x9E3779B97F4A7C15) & MASK
        z = self.s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)


def w1(samples):
    """The W1 setup and the stack index of every sample: (stacks, choices)."""
    rng = SplitMix64()
    funcs = [("pkg%d.mod%d.handler_%d" % (i % 50, i % 200, i),
              "/srv/app/pkg%d/mod%d.py" % (i % 50, i % 200),
              1 + (i * 7) % 500) for i in range(FUNCTIONS)]
    stacks = []
    for _ in range(STACKS):
        d = 8 + rng.next() % 57
        stacks.append([funcs[rng.next() % FUNCTIONS] for _ in range(d)])
    choices = array("I", (rng.next() % STACKS for _ in range(samples)))
    return stacks, choices


def recorder():
    return pprofkit.Recorder(
        [("cpu-time", "nanoseconds"), ("wall-time", "nanoseconds")],
        period=VALUE, period_type=("wall-time", "nanoseconds"), codec="zstd")


# The loops. Each takes (sample, stacks, choices, lo, hi, storm) and adds samples lo..hi-1.
# gen_* make the same Python objects without calling pprofkit.

def add_record(s, stacks, choices, lo, hi, storm):
    record = s.record
    values = [VALUE, VALUE]
    for k in range(lo, hi):
        record(stacks[choices[k]], values,
               {"thread id": 1000 + k % 8, "thread name": "Thread-%d" % (k % 8),
                "task name": "Task-%d" % (k if storm else k % 100)})


def gen_record(s, stacks, choices, lo, hi, storm):
    values = [VALUE, VALUE]
    sink = None
    for k in range(lo, hi):
        sink = (stacks[choices[k]], values,
                {"thread id": 1000 + k % 8, "thread name": "Thread-%d" % (k % 8),
                 "task name": "Task-%d" % (k if storm else k % 100)})
    return sink


def add_builder(s, stacks, choices, lo, hi, storm):
    start, push_frame, push_label = s.start, s.push_frame, s.push_label
    set_value, flush = s.set_value, s.flush
    for k in range(lo, hi):
        start()
        for name, filename, line in stacks[choices[k]]:
            push_frame(name, filename, line)
        push_label("thread id", 1000 + k % 8)
        push_label("thread name", "Thread-%d" % (k % 8))
        push_label("task name", "Task-%d" % (k if storm else k % 100))
        set_value(0, VALUE)
        set_value(1, VALUE)
        flush()


def gen_builder(s, stacks, choices, lo, hi, storm):
    sink = None
    for k in range(lo, hi):
        sink = (stacks[choices[k]], 1000 + k % 8, "Thread-%d" % (k % 8),
                "Task-%d" % (k if storm else k % 100))
    return sink


LOOPS = {"record": (add_record, gen_record), "builder": (add_builder, gen_builder)}

_VALUE_RE = re.compile(rb"^\s*value: (-?\d+)$", re.M)


def value_sums(data, n_types):
    """Sums of each value type of an export, read from protoc's decoding (support.py's
    protoc_text runs `protoc --decode=perftools.profiles.Profile`). Only Sample messages
    have a field named `value`; its values come n_types per sample, in order."""
    import support

    proto_dir, proto_name = os.path.split(support.PROTO)
    out = subprocess.run(
        ["protoc", "--decode=perftools.profiles.Profile", "-I", proto_dir, proto_name],
        input=support.raw(data), stdout=subprocess.PIPE, check=True).stdout
    vals = [int(v) for v in _VALUE_RE.findall(out)]
    if len(vals) % n_types:
        raise ValueError("value count %d is not a multiple of %d" % (len(vals), n_types))
    return [sum(vals[i::n_types]) for i in range(n_types)], len(vals) // n_types


DEGRADATIONS = pprofkit._native.DEGRADATIONS + (
    "samples_dropped_nomem", "samples_lost_export", "export_failures")


def run(variant, api, stacks, choices, check):
    storm = variant == "storm"
    add, gen = LOOPS[api]
    n = len(choices)
    r = recorder()
    s = pprofkit.Sample(r)
    # The objects alone, the same loop without pprofkit calls.
    t0 = time.perf_counter_ns()
    gen(s, stacks, choices, 0, n, storm)
    gen_ns = time.perf_counter_ns() - t0
    add_ns = 0
    exports = []
    export_ns = []
    for lo in range(0, n, WINDOW):
        hi = min(n, lo + WINDOW)
        t0 = time.perf_counter_ns()
        add(s, stacks, choices, lo, hi, storm)
        add_ns += time.perf_counter_ns() - t0
        t0 = time.perf_counter_ns()
        e = r.export()
        export_ns.append(time.perf_counter_ns() - t0)
        exports.append(e)
    stats = r.stats()
    s.close()
    r.close()

    problems = []
    if stats["samples_flushed"] != n:
        problems.append("samples_flushed %d != %d" % (stats["samples_flushed"], n))
    if sum(e.stats["samples_added"] for e in exports) != n:
        problems.append("exports hold %d samples added, not %d"
                        % (sum(e.stats["samples_added"] for e in exports), n))
    for k in DEGRADATIONS:
        if stats.get(k):
            problems.append("%s %d" % (k, stats[k]))
    checked = None
    if check:
        totals = [0, 0]
        aggregated = 0
        for e in exports:
            sums, count = value_sums(e.data, 2)
            totals = [a + b for a, b in zip(totals, sums)]
            aggregated += count
            if count != e.stats["samples_aggregated"]:
                problems.append("export %d: protoc reads %d samples, stats say %d"
                                % (e.seq, count, e.stats["samples_aggregated"]))
        for name, t in zip(("cpu-time", "wall-time"), totals):
            if t != n * VALUE:
                problems.append("%s sum %d != %d" % (name, t, n * VALUE))
        checked = not problems
    for p in problems:
        print("bench_python: %s %s: %s" % (variant, api, p), file=sys.stderr)
    export_ns.sort()
    return {
        "variant": variant, "api": api,
        "python": platform.python_version(),
        "ns_per_sample": round(add_ns / n, 1),
        "net_ns_per_sample": round((add_ns - gen_ns) / n, 1),
        "gen_ns_per_sample": round(gen_ns / n, 1),
        "samples": n, "exports": len(exports),
        "export_ms_median": round(export_ns[len(export_ns) // 2] / 1e6, 1),
        "bytes_median": sorted(len(e.data) for e in exports)[len(exports) // 2],
        "checked": checked if check else "not checked",
        "problems": problems,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--variant", choices=("steady", "storm", "both"), default="both")
    ap.add_argument("--api", choices=("record", "builder", "both"), default="both")
    ap.add_argument("--no-check", action="store_true",
                    help="skip decoding the exports with protoc")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "python.json"))
    a = ap.parse_args()
    variants = ("steady", "storm") if a.variant == "both" else (a.variant,)
    apis = ("record", "builder") if a.api == "both" else (a.api,)

    t0 = time.perf_counter()
    stacks, choices = w1(a.samples)
    print("bench_python: Python %s (%s), W1 %d samples, export every %d (zstd-1); "
          "workload made in %.1f s" % (platform.python_version(), sys.executable,
                                        a.samples, WINDOW, time.perf_counter() - t0))
    rows = []
    print("%-8s %-8s %8s %14s %14s %12s %10s %8s" % (
        "variant", "api", "python", "loop ns/smp", "net ns/smp", "export ms", "MB/export",
        "checked"))
    for variant in variants:
        for api in apis:
            row = run(variant, api, stacks, choices, not a.no_check)
            rows.append(row)
            print("%-8s %-8s %8s %14.0f %14.0f %12.1f %10.2f %8s" % (
                variant, api, row["python"], row["ns_per_sample"], row["net_ns_per_sample"],
                row["export_ms_median"], row["bytes_median"] / 1e6, row["checked"]),
                flush=True)

    old = []
    if a.json and os.path.exists(a.json):
        with open(a.json) as f:
            try:
                old = json.load(f)
            except ValueError:
                old = []
    keys = {(r["variant"], r["api"], r["python"]) for r in rows}
    merged = [r for r in old if (r.get("variant"), r.get("api"), r.get("python")) not in keys]
    merged += rows
    merged.sort(key=lambda r: (r["python"], r["variant"], r["api"]))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(merged, f, indent=1)
            f.write("\n")
        print("written: %s" % a.json)
    return 0 if all(r["checked"] in (True, "not checked") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
