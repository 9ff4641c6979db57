"""python_overhead.py - what the sampling profiler costs a CPU-bound Python program.

Part 1, slowdown. Three pure-Python workloads, each a fixed amount of work split evenly
over 1, 4 or 16 threads (with several threads the GIL runs one at a time, so the wall
time of the work is the figure, not CPU time):
  fib      recursion: fib(20), again and again;
  objects  small objects: make 2,000 instances, sort them by an attribute, sum a field;
  strings  formatting, join, split, replace, upper, count on short strings.
Each run is a subprocess (this file with --child) under one variant:
  base      python3 bench/python_overhead.py --child ...
  pprofkit  python3 -m pprofkit run --rate 100 --quiet --out TMP bench/python_overhead.py ...
  cprofile  python3 -m cProfile -o TMP/FILE bench/python_overhead.py ...
  base-old, austin   the same under an older CPython (--old-python, default 3.10 from pyenv)
            without and with `austin -i 10000` (100 Hz; Debian's austin 1.0.1 cannot
            read CPython 3.11 and later, see docs/performance.md)
Round by round every (workload, threads) pair runs every variant once, in an order that
rotates each round; a variant's slowdown in a round is its time over the base time of
the same round (austin over base-old). Reported per variant: median and quartiles over
the rounds of the slowdown of the work's own time (measured by the child around the
work), of the whole process's wall time (start-up, import and the last export included),
and of CPU time (user + sys of the process tree).

Part 2, the sampler itself (in this process, pprofkit.Profiler at 100 Hz with no files):
N threads each 50 frames deep, idle (blocked in Event.wait), busy (a pure-Python
loop) or yielding (the same loop letting the GIL go every ~20 us: running threads
without the GIL convoy that busy ones make), for --sampler-seconds each, frames pushed by function id and (the next case) by
their strings; from Sampler.stats(): ticks, GIL hold per tick (phase 1: mean, max), GIL
wait per tick, phase 2 per tick (recording, without the GIL: tick - hold), the sampler
thread's CPU time as % of one core.

Prints tables; writes bench/results/python_overhead.json (rounds' raw times and the
summaries). Asserts nothing about time.

Usage: PYTHONPATH=build/python/py3.11.2 python3 bench/python_overhead.py
         [--rounds 15] [--other-rounds 5] [--workloads fib,objects,strings]
         [--threads 1,4,16] [--scale 1.0] [--variants base,pprofkit,cprofile,austin]
         [--old-python PATH] [--sampler-seconds 5] [--skip-overhead] [--skip-sampler]
"""

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SELF = os.path.abspath(__file__)

# ---- Workloads (run by the child) ------------------------------------------------------


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def unit_fib():
    return fib(20)


class Item:
    def __init__(self, key, name, weight):
        self.key = key
        self.name = name
        self.weight = weight


def unit_objects():
    items = [Item((i * 7919) % 2003, "item", i & 15) for i in range(2000)]
    items.sort(key=lambda it: it.key)
    return sum(it.weight for it in items)


def unit_strings():
    parts = ["%s-%d:%x" % ("key", i, i * 31) for i in range(600)]
    text = ",".join(parts)
    fields = text.split(",")
    out = [f.replace("key", "k").upper() for f in fields]
    return sum(s.count("K") for s in out) + len(" ".join(out))


WORKLOADS = {"fib": (unit_fib, 600), "objects": (unit_objects, 1100),
             "strings": (unit_strings, 2400)}  # units for ~1 s on the 2-vCPU VM


def run_work(workload, threads, units):
    """The work split over `threads` threads; its wall time in seconds."""
    fn = WORKLOADS[workload][0]
    share = [units // threads + (1 if i < units % threads else 0) for i in range(threads)]

    def work(n):
        for _ in range(n):
            fn()

    t0 = time.perf_counter()
    if threads == 1:
        work(share[0])
    else:
        ts = [threading.Thread(target=work, args=(n,), name="worker-%d" % i)
              for i, n in enumerate(share)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    return time.perf_counter() - t0


def child(workload, threads, units):
    dt = run_work(workload, threads, units)
    print(json.dumps({"work_s": dt, "python": platform.python_version()}))


def paired_child(workload, threads, units, pairs, out_dir):
    """Part 3's process: `pairs` pairs of rounds of the same work, one round with the
    profiler (started before the round, stopped after it: its last export is outside
    the round) and one without, the order of each pair alternating (ABBA)."""
    import pprofkit

    on, off, direct = [], [], []
    run_work(workload, threads, units)  # warm-up: imports, caches, the allocator
    for i in range(pairs):
        for profiled in ((False, True) if i % 2 == 0 else (True, False)):
            if profiled:
                p = pprofkit.Profiler(rate=100, out_dir=out_dir, export_period=1.0)
                p.start()
                on.append(run_work(workload, threads, units))
                summary = p.stop()
                if summary["samples"] == 0:
                    raise RuntimeError("the profiler took no sample")
                # What the program lost for certain: the GIL held by the sampler's
                # passes and the main thread's own samples (main_callback).
                s = summary["sampler"]
                direct.append((s["gil_hold_ns_total"] + s["main_callback_ns_total"]) / 1e9)
            else:
                off.append(run_work(workload, threads, units))
    print(json.dumps({"on": on, "off": off, "direct": direct,
                      "python": platform.python_version()}))


# ---- Part 1: the harness ----------------------------------------------------------------


def command(variant, py, old_py, tmp, workload, threads, units):
    args = [SELF, "--child", workload, str(threads), str(units)]
    if variant == "base":
        return [py] + args
    if variant == "pprofkit":
        return [py, "-m", "pprofkit", "run", "--rate", "100", "--quiet", "--out",
                os.path.join(tmp, "pprofkit")] + args
    if variant == "cprofile":
        return [py, "-m", "cProfile", "-o", os.path.join(tmp, "cprofile.out")] + args
    if variant == "base-old":
        return [old_py] + args
    if variant == "austin":
        return ["austin", "-i", "10000", "-o", os.path.join(tmp, "austin.out"), old_py] + args
    raise ValueError(variant)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_one(cmd, env):
    c0 = children_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    wall = time.perf_counter() - t0
    cpu = children_cpu() - c0
    out = p.stdout.decode(errors="replace").strip().splitlines()
    if p.returncode != 0 or not out or not out[-1].startswith("{"):
        raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), p.returncode,
                                                    p.stderr.decode(errors="replace")[-2000:]))
    r = json.loads(out[-1])
    return {"work_s": r["work_s"], "wall_s": wall, "cpu_s": cpu, "python": r["python"]}


def quartiles(xs):
    xs = sorted(xs)
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def overhead(a, py, old_py):
    variants = a.variants
    if "austin" in variants and not (shutil.which("austin") and old_py):
        print("austin or --old-python missing: no austin runs", file=sys.stderr)
        variants = [v for v in variants if v not in ("austin", "base-old")]
    if "austin" in variants and "base-old" not in variants:
        variants.append("base-old")
    env = dict(os.environ)
    configs = [(w, t) for w in a.workloads for t in a.threads]
    raw = {}  # (workload, threads, variant) -> list of runs (None where not run)
    tmp = tempfile.mkdtemp(prefix="ppk-overhead-")
    t_start = time.time()
    try:
        for rnd in range(a.rounds):
            for ci, (w, t) in enumerate(configs):
                units = max(16, int(WORKLOADS[w][1] * a.scale))
                vs = [v for v in variants
                      if v in ("base", "pprofkit") or rnd < a.other_rounds]
                k = (rnd + ci) % len(vs)
                for v in vs[k:] + vs[:k]:
                    r = run_one(command(v, py, old_py, tmp, w, t, units), env)
                    raw.setdefault((w, t, v), [None] * a.rounds)[rnd] = r
            print("round %d/%d done (%.0f s)" % (rnd + 1, a.rounds, time.time() - t_start),
                  file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    versions = {v: next(r["python"] for r in runs if r)
                for (_, _, v), runs in raw.items()}
    rows = []
    print()
    print("slowdown = time with the variant / time without, same round; median "
          "[quartiles] over rounds")
    print("%-8s %3s %-9s %6s %8s %24s %24s %24s" % (
        "workload", "thr", "variant", "rounds", "base s", "work time", "process wall",
        "process CPU"))
    for w, t in configs:
        for v in variants:
            if v in ("base", "base-old"):
                continue
            ref = "base-old" if v == "austin" else "base"
            pairs = [(x, b) for x, b in zip(raw[(w, t, v)], raw[(w, t, ref)]) if x and b]
            row = {"workload": w, "threads": t, "variant": v, "python": versions[v],
                   "rounds": len(pairs),
                   "base_work_s": statistics.median(b["work_s"] for _, b in pairs)}
            cells = []
            for m in ("work_s", "wall_s", "cpu_s"):
                q1, med, q3 = quartiles([x[m] / b[m] for x, b in pairs])
                row[m.replace("_s", "") + "_slowdown"] = [round(q1, 4), round(med, 4),
                                                          round(q3, 4)]
                cells.append("%+6.1f%% [%+.1f, %+.1f]" % ((med - 1) * 100, (q1 - 1) * 100,
                                                          (q3 - 1) * 100))
            rows.append(row)
            print("%-8s %3d %-9s %6d %8.2f %24s %24s %24s" % (
                w, t, v, len(pairs), row["base_work_s"], *cells))
    print()
    print("over all workloads and thread counts, median work-time slowdown per variant:")
    for v in variants:
        if v in ("base", "base-old"):
            continue
        for t in a.threads:
            meds = [r["work_slowdown"][1] for r in rows if r["variant"] == v and
                    r["threads"] == t]
            print("  %-9s %2d thread(s): %+.1f%% (per workload: %s)" % (
                v, t, (statistics.median(meds) - 1) * 100,
                ", ".join("%+.1f%%" % ((m - 1) * 100) for m in meds)))
    return {"rows": rows, "versions": versions,
            "raw": [{"workload": w, "threads": t, "variant": v, "runs": runs}
                    for (w, t, v), runs in raw.items()]}


# ---- Part 3: paired rounds in one process ------------------------------------------------


def bootstrap_median(xs, n=2000, seed=1):
    """A 95% interval of the median of xs (percentile bootstrap)."""
    import random
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[int(0.975 * n) - 1]


def paired(a, py):
    """Slowdown from pairs of rounds in one process (part 3): the machine's drift over
    seconds hits both rounds of a pair alike, and one process has one memory layout.
    Also "direct": the share of a profiled round's time that the program certainly
    lost, the GIL held by the sampler's passes plus the main thread's own samples."""
    rows = []
    tmp = tempfile.mkdtemp(prefix="ppk-paired-")
    print()
    print("paired rounds in one process, %d pairs per cell, rounds of ~%.2f s; slowdown = "
          "round with the profiler / the other round of its pair: median [95%% interval of "
          "the median] (quartiles)" % (a.pairs, a.round_seconds))
    print("%-8s %3s %8s %28s %20s %8s" % ("workload", "thr", "base s", "slowdown", "quartiles",
                                          "direct"))
    try:
        for w in a.workloads:
            for t in a.threads:
                units = max(4, int(WORKLOADS[w][1] * a.round_seconds))
                out = os.path.join(tmp, "%s-%d" % (w, t))
                cmd = [py, SELF, "--paired-child", w, str(t), str(units), str(a.pairs), out]
                p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                lines = p.stdout.decode(errors="replace").strip().splitlines()
                if p.returncode != 0 or not lines:
                    raise RuntimeError("%s failed (%d): %s" % (
                        " ".join(cmd), p.returncode, p.stderr.decode(errors="replace")[-2000:]))
                r = json.loads(lines[-1])
                ratios = [x / y for x, y in zip(r["on"], r["off"])]
                direct = statistics.median(d / x for d, x in zip(r["direct"], r["on"]))
                lo, hi = bootstrap_median(ratios)
                q1, med, q3 = quartiles(ratios)
                rows.append({"workload": w, "threads": t, "python": r["python"],
                             "pairs": len(ratios), "base_round_s": statistics.median(r["off"]),
                             "slowdown_median": round(med, 4),
                             "slowdown_ci95": [round(lo, 4), round(hi, 4)],
                             "slowdown_quartiles": [round(q1, 4), round(q3, 4)],
                             "direct_median": round(direct, 5),
                             "on": r["on"], "off": r["off"], "direct": r["direct"]})
                print("%-8s %3d %8.3f %+9.2f%% [%+.2f, %+.2f] %20s %7.2f%%" % (
                    w, t, statistics.median(r["off"]), (med - 1) * 100, (lo - 1) * 100,
                    (hi - 1) * 100, "(%+.1f, %+.1f)" % ((q1 - 1) * 100, (q3 - 1) * 100),
                    direct * 100), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return rows


# ---- Part 2: the sampler's own cost -------------------------------------------------------


def deep(depth, fn):
    if depth <= 1:
        return fn()
    return deep(depth - 1, fn)


def sampler_case(threads, frames, state, seconds, function_ids, cpu_budget=1.0):
    import pprofkit

    stop = threading.Event()
    ready = threading.Barrier(threads + 1)

    def spin():
        ready.wait()
        x = 0
        while not stop.is_set():
            for i in range(1000):
                x += i * i
        return x

    def spin_yielding():
        # Lets the GIL go every ~20 us: the sampler takes it at once (no convoy), and
        # finds every thread's frames changed since the previous tick.
        ready.wait()
        x = 0
        while not stop.is_set():
            for i in range(300):
                x += i * i
            time.sleep(0)
        return x

    def idle():
        ready.wait()
        stop.wait()

    # A thread's own frames: `frames` levels of deep() plus the threading bootstrap ones.
    body = {"idle": idle, "busy": spin, "yielding": spin_yielding}[state]
    ts = [threading.Thread(target=deep, args=(frames, body),
                           name="bench-%d" % i) for i in range(threads)]
    for t in ts:
        t.start()
    ready.wait()
    p = pprofkit.Profiler(rate=100, out_dir=None, function_ids=function_ids,
                          cpu_budget=cpu_budget)
    p.start()
    t0 = time.perf_counter()
    time.sleep(seconds)
    dt = time.perf_counter() - t0
    summary = p.stop()
    stop.set()
    for t in ts:
        t.join()
    s = summary["sampler"]
    ticks = max(1, s["ticks"])
    return {
        "threads": threads, "frames": frames, "state": state,
        "push": "id" if function_ids else "string",
        "seconds": round(dt, 2), "ticks": s["ticks"], "samples": s["samples"],
        "samples_flushed": summary["samples"],
        "gil_hold_us_mean": round(s["gil_hold_ns_total"] / ticks / 1e3, 1),
        "gil_hold_us_max": round(s["gil_hold_ns_max"] / 1e3, 1),
        "gil_wait_us_mean": round(s["gil_wait_ns_total"] / ticks / 1e3, 1),
        "gil_wait_us_max": round(s["gil_wait_ns_max"] / 1e3, 1),
        "tick_us_mean": round(s["tick_ns_total"] / ticks / 1e3, 1),
        "phase2_us_mean": round((s["tick_ns_total"] - s["gil_hold_ns_total"]) / ticks / 1e3, 1),
        "phase0_us_mean": round(s["prepare_ns_total"] / ticks / 1e3, 1),
        # The sampler thread's CPU time, phase 1 where the GIL's holder ran it (CPython
        # 3.12+) in that thread, and the main thread's samples of itself (what the CPU
        # budget counts).
        "sampler_cpu_pct": round((s["cpu_ns"] + s["holder_ns_total"] +
                                  s["main_callback_charged_ns_total"]) / (dt * 1e9) * 100, 3),
        "holder_passes": s["holder_passes"],
        "ticks_late": s["ticks_late"], "samples_failed": s["samples_failed"],
        "main_callbacks": s["main_callbacks"], "cpu_budget": cpu_budget,
        "ticks_slowed": s["ticks_slowed"],
    }


def sampler(a):
    cases = [(1, 50, "idle"), (1, 50, "busy"), (4, 50, "idle"), (4, 50, "busy"),
             (16, 50, "idle"), (16, 50, "busy"), (16, 50, "yielding")]
    rows = []
    print()
    print("the sampler at 100 Hz, CPU budget %g%%, in process (Python %s), %.0f s a case; "
          "GIL hold, wait and tick in us; slowed: ticks the budget moved later"
          % (a.cpu_budget, platform.python_version(), a.sampler_seconds))
    print("%3s %6s %5s %6s %6s %8s %10s %9s %10s %9s %8s %8s %10s %5s %6s %6s" % (
        "thr", "frames", "state", "push", "ticks", "samples", "hold mean", "hold max",
        "wait mean", "wait max", "phase 0", "phase 2", "CPU %core", "late", "holder",
        "slowed"))
    for threads, frames, state in cases:
        for ids in (True, False):
            r = sampler_case(threads, frames, state, a.sampler_seconds, ids, a.cpu_budget)
            r["python"] = platform.python_version()
            rows.append(r)
            print("%3d %6d %5s %6s %6d %8d %10.1f %9.1f %10.1f %9.1f %8.1f %8.1f %10.3f %5d %6d "
                  "%6d" % (
                      threads, frames, r["state"], r["push"], r["ticks"], r["samples"],
                      r["gil_hold_us_mean"], r["gil_hold_us_max"], r["gil_wait_us_mean"],
                      r["gil_wait_us_max"], r["phase0_us_mean"], r["phase2_us_mean"],
                      r["sampler_cpu_pct"], r["ticks_late"], r["holder_passes"],
                      r["ticks_slowed"]), flush=True)
        if r["samples"] != r["samples_flushed"]:
            print("  note: the sampler counted %d samples, the recorder %d"
                  % (r["samples"], r["samples_flushed"]))
    return rows


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    if len(sys.argv) == 7 and sys.argv[1] == "--paired-child":
        paired_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                     sys.argv[6])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--other-rounds", type=int, default=5,
                    help="rounds that also run cprofile and austin (the first ones)")
    ap.add_argument("--workloads", default="fib,objects,strings")
    ap.add_argument("--threads", default="1,4,16")
    ap.add_argument("--scale", type=float, default=1.0, help="work per run")
    ap.add_argument("--variants", default="base,pprofkit,cprofile,austin")
    ap.add_argument("--old-python", default="/root/.pyenv/versions/3.10.13/bin/python3",
                    help="the interpreter austin runs (Debian's austin 1.0.1 reads <= 3.10)")
    ap.add_argument("--sampler-seconds", type=float, default=5)
    ap.add_argument("--cpu-budget", type=float, default=1.0,
                    help="the sampler table's Profiler(cpu_budget=...): percent of a core, "
                         "0 for no limit (the full rate)")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-sampler", action="store_true")
    ap.add_argument("--paired", action="store_true",
                    help="part 3 instead of part 1: paired rounds in one process")
    ap.add_argument("--pairs", type=int, default=30)
    ap.add_argument("--round-seconds", type=float, default=0.3)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "python_overhead.json"))
    a = ap.parse_args()
    a.workloads = a.workloads.split(",")
    a.threads = [int(x) for x in a.threads.split(",")]
    a.variants = a.variants.split(",")
    if "base" not in a.variants:
        a.variants.insert(0, "base")
    old_py = a.old_python if os.path.exists(a.old_python) else None
    print("python_overhead: %s (Python %s), %d CPUs, %s" % (
        sys.executable, platform.python_version(), os.cpu_count(),
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())))
    # A part that is skipped keeps what the file holds of an earlier run: each part
    # says when and how it ran.
    result = {}
    if a.json and os.path.exists(a.json):
        with open(a.json) as f:
            result = json.load(f)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = " ".join(["PYTHONPATH=" + os.environ.get("PYTHONPATH", ""), sys.executable,
                        os.path.relpath(SELF)] + sys.argv[1:])
    part = {"python": platform.python_version(), "cpus": os.cpu_count(), "date": when,
            "command": command}
    if a.paired:
        result["paired"] = paired(a, sys.executable)
        result["paired_run"] = dict(part, pairs=a.pairs, round_seconds=a.round_seconds)
    elif not a.skip_overhead:
        result["overhead"] = overhead(a, sys.executable, old_py)
        result["overhead_run"] = dict(part, rounds=a.rounds, other_rounds=a.other_rounds)
    if not a.skip_sampler:
        result["sampler"] = sampler(a)
        result["sampler_run"] = part
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print("written: %s" % a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
