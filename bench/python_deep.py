"""The sampler's cost for a thread with a deep stack: `python_deep.py DEPTH SECONDS`.
A thread recurses DEPTH frames and computes at the bottom for SECONDS while the profiler
samples at 100 Hz (cpu_budget 0, no files); prints one JSON line: the ticks, the GIL held
a tick and the whole tick (phase 2 included), in microseconds, from Sampler.stats()."""

import json
import sys
import tempfile
import threading
import time

import pprofkit

sys.setrecursionlimit(1_000_000)


def spin(seconds):
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(1000):
            x += i
    return x


def down(n, seconds):
    return spin(seconds) if n == 0 else down(n - 1, seconds)


def main():
    depth, seconds = int(sys.argv[1]), float(sys.argv[2])
    p = pprofkit.Profiler(rate=100, out_dir=tempfile.mkdtemp(), cpu_budget=0)
    p.start()
    t = threading.Thread(target=down, args=(depth, seconds))
    t.start()
    t.join()
    s = p.stop()["sampler"]
    ticks = max(1, s["ticks"])
    print(json.dumps({"python": sys.version.split()[0], "depth": depth, "ticks": s["ticks"],
                      "gil_hold_us": round(s["gil_hold_ns_total"] / ticks / 1e3, 1),
                      "tick_us": round(s["tick_ns_total"] / ticks / 1e3, 1)}))


if __name__ == "__main__":
    main()
