"""python_service.py - what the sampler costs a tick on the service of
examples/asyncio_tasks.py (every task a name of its own, ~2,000 made and ended a second,
a thread pool beside the loop): the example runs in a subprocess, in process under
pprofkit.Profiler(rate=100, out_dir=None), for --seconds; the sampler's statistics
then give, per tick: the GIL held by the sampler's passes, the part of it reading
asyncio tasks, and the tasks sampled and read again; and a read's cost, the sampler
thread's CPU (% of one core) and the ticks a second. --rounds runs, one line each, and
the medians. Asserts nothing about time.

Usage: PYTHONPATH=build/python/py3.11.2 /usr/bin/python3 bench/python_service.py
         [--rounds 3] [--seconds 8] [--cpu-budget 1.0]
"""

import argparse
import json
import os
import runpy
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "asyncio_tasks.py")


def child(seconds, budget):
    import pprofkit

    p = pprofkit.Profiler(rate=100, out_dir=None, export_period=60, cpu_budget=budget)
    p.start()
    t0 = time.monotonic()
    sys.argv = [EXAMPLE, "--seconds", str(seconds), "--report", str(seconds * 10)]
    runpy.run_path(EXAMPLE, run_name="__main__")
    st = p.sampler.stats()
    dt = time.monotonic() - t0
    p.stop()
    print(json.dumps({"seconds": dt, "sampler": st}), flush=True)


def figures(r):
    st, dt = r["sampler"], r["seconds"]
    ticks = max(1, st["ticks"])
    return {
        "ticks_s": st["ticks"] / dt,
        "gil_us_tick": st["gil_hold_ns_total"] / ticks / 1e3,
        "task_us_tick": st["task_ns_total"] / ticks / 1e3,
        "seen_tick": st["tasks_seen"] / ticks,
        "read_tick": st["tasks_walked"] / ticks,
        "read_us": st.get("task_read_ns_total", 0) / max(1, st["tasks_walked"]) / 1e3,
        "cpu_pct": 100 * st["cpu_ns"] / 1e9 / dt,
        "task_samples_s": st["task_samples"] / dt,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=2, metavar=("SECONDS", "BUDGET"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--cpu-budget", type=float, default=1.0)
    a = ap.parse_args()
    if a.child:
        child(float(a.child[0]), float(a.child[1]))
        return
    cols = ["ticks_s", "gil_us_tick", "task_us_tick", "seen_tick", "read_tick", "read_us",
            "cpu_pct", "task_samples_s"]
    print("round " + " ".join("%14s" % c for c in cols))
    runs = []
    for rnd in range(a.rounds):
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                              str(a.seconds), str(a.cpu_budget)],
                             stdout=subprocess.PIPE, check=True).stdout.decode()
        f = figures(json.loads(out.strip().splitlines()[-1]))
        runs.append(f)
        print("%5d " % rnd + " ".join("%14.2f" % f[c] for c in cols), flush=True)
    print("  med " + " ".join("%14.2f" % statistics.median(f[c] for f in runs) for c in cols))


if __name__ == "__main__":
    main()
