"""flame_open.py - how long the flame graph page of a big profile takes to open.

Writes a W3 profile (bench/w3.h, the shared notes' W3: 16,000 functions, 12,000 stacks of
64 to 256 frames, labels "thread id", "local root span id" and "span id", cpu-time and
wall-time, every 4th sample timestamped, 2,000 endpoints) with the library through the
Python package, --samples samples in one window (136,000 make a file of ~50 MB: the
frames are random, so gzip saves little); makes its page with `python -m pprofkit
flame`; then loads the page --runs times from file:// in headless Chromium (cdp.py, a
1200 x 800 viewport) and reads the page's own timing (performance.now(), ms since
navigation start): JSON parsed, tree built, first drawing done, and painted (a timer
after the next animation frame), the open time.

Prints each run and the medians; appends a row (date, command, profile bytes, page
bytes, times) to bench/results/flame_open.json. Asserts nothing about time.

Usage: PYTHONPATH=build/python/py3.11.2 /usr/bin/python3 bench/flame_open.py
         [--samples 136000] [--runs 5] [--keep DIR]
"""

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))

import cdp  # noqa: E402

MASK = (1 << 64) - 1


def splitmix64(state):
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & MASK
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def write_w3(path, samples):
    """The first `samples` samples of W3 in one profile at path (gzip)."""
    import pprofkit

    rng = [1234]
    fns = [("App::Mod%d::Klass%d#call_%d" % (i % 400, i % 3000, i),
            "/app/lib/mod%d/klass%d.rb" % (i % 400, i % 3000), 1 + (i * 11) % 3000)
           for i in range(16000)]
    stacks = []
    for _ in range(12000):
        depth = 64 + splitmix64(rng) % 193
        stacks.append([fns[splitmix64(rng) % 16000] for _ in range(depth)])
    types = [("cpu-time", "nanoseconds"), ("wall-time", "nanoseconds")]
    with pprofkit.Recorder(types, period=10_000_000, period_type=types[1],
                           memory_limit=1 << 30) as rec:
        for i in range(1, 2001):
            rec.set_endpoint(i, "POST /api/v%d/items/%d" % (i % 3, i % 40))
        with pprofkit.Sample(rec) as s:
            for k in range(samples):
                stack = stacks[splitmix64(rng) % 12000]
                root_span = 1 + splitmix64(rng) % 2000
                span = splitmix64(rng)
                span -= (1 << 64) if span >> 63 else 0
                s.record(stack, [10_000_000, 10_000_000],
                         {"thread id": 1 + k % 16, "local root span id": root_span,
                          "span id": span},
                         timestamp_ns=1750000000000000000 + k * 1000 if k % 4 == 0 else None)
        export = rec.export()
        degraded = {k: v for k, v in rec.stats().items()
                    if k.endswith(("_dropped", "_overflowed")) and v}
    if degraded:
        raise SystemExit("flame_open.py: the window degraded: %r" % degraded)
    with open(path, "wb") as f:
        f.write(export.data)
    return len(export.data), len(gzip.decompress(export.data))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=136000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", help="write the profile and the page into this directory")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "flame_open.json"))
    args = ap.parse_args()

    work = args.keep or tempfile.mkdtemp(prefix="ppk-flame-bench-")
    os.makedirs(work, exist_ok=True)
    try:
        prof = os.path.join(work, "w3.pb.gz")
        page = os.path.join(work, "w3.html")
        t = time.monotonic()
        prof_bytes, raw_bytes = write_w3(prof, args.samples)
        gen_s = time.monotonic() - t
        print("profile: W3, %d samples: %d bytes (%d uncompressed), written in %.1f s"
              % (args.samples, prof_bytes, raw_bytes, gen_s), flush=True)
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "pprofkit", "flame", "-o", page, prof],
                       check=True)
        page_s = time.monotonic() - t
        page_bytes = os.path.getsize(page)
        print("page: %d bytes, made in %.1f s (python -m pprofkit flame)"
              % (page_bytes, page_s), flush=True)

        runs = []
        with cdp.Browser(timeout=120) as b:
            p = b.page(1200, 800)
            for r in range(args.runs):
                p.navigate("about:blank")
                p.navigate("file://" + os.path.abspath(page), timeout=120)
                p.wait_for("window.flame && window.flame.ready", timeout=120)
                timing = p.evaluate("flame.timing")
                timing["frames_drawn"] = p.evaluate("flame.frames().length")
                runs.append(timing)
                print("  run %d: parsed %.0f ms, built %.0f ms, drawn %.0f ms, painted "
                      "%.0f ms (%d frames drawn)" % (r + 1, timing["parsed"], timing["built"],
                                                     timing["drawn"], timing["painted"],
                                                     timing["frames_drawn"]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs) for k in ("parsed", "built", "drawn",
                                                                "painted")}
    print("median of %d runs: open (painted) %.0f ms; parsed %.0f, built %.0f, drawn %.0f ms"
          % (len(runs), med["painted"], med["parsed"], med["built"], med["drawn"]))
    row = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": " ".join(["python3", "bench/flame_open.py"] + sys.argv[1:]),
           "python": platform.python_version(), "cpus": os.cpu_count(),
           "samples": args.samples, "profile_bytes": prof_bytes,
           "profile_bytes_uncompressed": raw_bytes, "page_bytes": page_bytes,
           "page_make_s": round(page_s, 2), "median_ms": med, "runs_ms": runs}
    rows = []
    if os.path.exists(args.json):
        with open(args.json) as f:
            rows = json.load(f)
    rows.append(row)
    with open(args.json, "w") as f:
        json.dump(rows, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
