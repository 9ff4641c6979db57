"""python_tasks.py - what sampling asyncio tasks costs: an asyncio service with N live
tasks under the profiler at 100 Hz.

The service (a subprocess: this file with --child): N tasks, each in a loop of
`await asyncio.sleep(d)` then a little work (a sum over 200 integers), d drawn
uniformly from (--modes):
  busy   50 ms to 1 s: ~N / 0.525 tasks wake up a second (1,900 a second for 1,000);
  idle   10 s to 60 s: ~N / 35 a second (29 for 1,000), most ticks find the loop idle.
Most tasks wait at any tick (each task's first sleep is drawn from 0 to the maximum,
so that wake-ups are spread from the start). After a 1 s warm-up it starts the variant,
and after 5 s more (15 s for 10,000 tasks: the sampler reads each task once first)
measures --seconds:
  off        no profiler;
  threads    the profiler without task sampling (--no-asyncio-tasks: the thread only);
  scan       the profiler with task sampling, max_tasks_per_tick --cap (default 1000),
             without the call_soon hook (asyncio_task_hook=False): each tick visits
             the tasks;
  tasks      the same with the hook (the default): a tick visits the tasks whose steps
             the loop scheduled since the last, and a 64th of the cap others.
The profiler's cpu_budget is --cpu-budget (default 1.0, the profiler's own; 0: none).
The variants alternate round by round (the order rotates). Per run: the wake-ups done,
the event loop thread's CPU time, as % of the run and per wake-up (the service's cost:
a profiler that makes it wait for the GIL, or runs in it, raises it; the sampler
thread's own CPU is apart), and from Sampler.stats(): ticks; the time
tasks were read per tick (task_ns: with the GIL, by the sampler's pass or by the main
thread's callback when it samples itself alone); the GIL held per tick by the sampler's
passes (gil_hold) and the main thread's callback time per tick (both are time the
service cannot run); phase 2 per tick (recording, without the GIL); the sampler
thread's CPU as % of one core; tasks visited and read again per tick, task samples
recorded a second, ticks that read no task (the loop's thread had not run), and what
reading one task's chain again costs (read_us: task_read_ns_total / tasks_walked).

Prints a table (medians over the rounds); writes bench/results/python_tasks.json (rows
per run and the medians, the date and the command). Asserts nothing about time.

Usage: PYTHONPATH=build/python/py3.11.2 /usr/bin/python3 bench/python_tasks.py
         [--tasks 1000,10000] [--modes busy,idle] [--rounds 5] [--seconds 5] [--cap 1000]
         [--cpu-budget 1.0]
"""

import argparse
import asyncio
import json
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SELF = os.path.abspath(__file__)
VARIANTS = ("off", "threads", "scan", "tasks")


MODES = {"busy": (0.05, 1.0), "idle": (10.0, 60.0)}
SETTLE = 5.0  # seconds for 1,000 tasks, 1.5 s a 1,000 more


def child(n, seconds, variant, cap, mode, budget):
    import pprofkit

    done = [0]
    lo, hi = MODES[mode]

    async def worker(rng):
        d = rng.uniform(0, hi)  # the tasks' wake-ups spread from the start
        while True:
            await asyncio.sleep(d)
            sum(range(200))
            done[0] += 1
            d = rng.uniform(lo, hi)

    async def main():
        rng = random.Random(1)
        tasks = [asyncio.create_task(worker(random.Random(rng.random())), name="worker-%d" % i)
                 for i in range(n)]
        await asyncio.sleep(1.0)  # warm-up: every task has begun
        p = None
        if variant != "off":
            p = pprofkit.Profiler(rate=100, out_dir=None, export_period=60,
                                  asyncio_tasks=variant in ("scan", "tasks"),
                                  asyncio_task_hook=variant == "tasks",
                                  max_tasks_per_tick=cap, cpu_budget=budget)
            p.start()
        # The sampler reads every task once first (a 40th of the cap a tick: 4 s for
        # 10,000 tasks at 100 ticks a second, longer when the CPU budget spaces the
        # ticks), then a turn of the set begins the hook passes; the figures are those
        # of the steady state after it.
        await asyncio.sleep(max(SETTLE, 1.5e-3 * n))
        st0 = p.sampler.stats() if p else None
        d0, t0, c0 = done[0], time.monotonic(), time.thread_time()
        await asyncio.sleep(seconds)
        d1, t1, c1 = done[0], time.monotonic(), time.thread_time()
        out = {"wakeups": d1 - d0, "seconds": t1 - t0, "cpu_s": c1 - c0}
        if p is not None:
            st1 = p.sampler.stats()
            out["sampler"] = {k: (v if k.endswith("_max") or k == "refs_held" else v - st0[k])
                              for k, v in st1.items()}
            p.stop()
            out["recorder"] = p.summary["stats"]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return out

    print(json.dumps(asyncio.run(main())), flush=True)


def run_child(n, seconds, variant, cap, mode, budget):
    cmd = [sys.executable, SELF, "--child", str(n), str(seconds), variant, str(cap), mode,
           str(budget)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True).stdout.decode()
    return json.loads(out.strip().splitlines()[-1])


def figures(r):
    """One run's figures (per tick: microseconds)."""
    f = {"wakeups_s": r["wakeups"] / r["seconds"],
         "loop_cpu_pct": 100 * r["cpu_s"] / r["seconds"],
         "cpu_us_per_wakeup": 1e6 * r["cpu_s"] / max(1, r["wakeups"])}
    st = r.get("sampler")
    if st:
        ticks = max(1, st["ticks"])
        f.update({
            "ticks": st["ticks"],
            "task_us_tick": st["task_ns_total"] / ticks / 1e3,
            "gil_hold_us_tick": st["gil_hold_ns_total"] / ticks / 1e3,
            "gil_hold_us_max": st["gil_hold_ns_max"] / 1e3,
            "callback_us_tick": st["main_callback_ns_total"] / ticks / 1e3,
            "phase2_us_tick": (st["tick_ns_total"] - st["gil_hold_ns_total"]) / ticks / 1e3,
            "sampler_cpu_pct": 100 * st["cpu_ns"] / 1e9 / r["seconds"],
            "ticks_without_gil": st["ticks_without_gil"],
            "tasks_seen_tick": st["tasks_seen"] / ticks,
            "tasks_walked_tick": st["tasks_walked"] / ticks,
            "read_us": st["task_read_ns_total"] / max(1, st["tasks_walked"]) / 1e3,
            "tasks_skipped_tick": st["tasks_skipped"] / ticks,
            "task_samples_s": st["task_samples"] / r["seconds"],
            "quiet_pct": 100 * st["task_ticks_quiet"] / ticks,
            "hooked_pct": 100 * st["task_ticks_hooked"] / ticks,
        })
    return f


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", nargs=6,
                    metavar=("N", "SECONDS", "VARIANT", "CAP", "MODE", "BUDGET"))
    ap.add_argument("--tasks", default="1000,10000")
    ap.add_argument("--modes", default="busy,idle")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--cap", type=int, default=1000)
    ap.add_argument("--cpu-budget", type=float, default=1.0)
    ap.add_argument("--json", default=os.path.join(HERE, "results", "python_tasks.json"))
    a = ap.parse_args()
    if a.child:
        n, seconds, variant, cap, mode, budget = a.child
        child(int(n), float(seconds), variant, int(cap), mode, float(budget))
        return
    rows, summary = [], {}
    for mode in a.modes.split(","):
        for n in [int(x) for x in a.tasks.split(",")]:
            for rnd in range(a.rounds):
                k = rnd % len(VARIANTS)
                order = VARIANTS[k:] + VARIANTS[:k]
                for v in order:
                    r = run_child(n, a.seconds, v, a.cap, mode, a.cpu_budget)
                    rows.append({"mode": mode, "tasks": n, "round": rnd, "variant": v,
                                 "raw": r, "figures": figures(r)})
                    print("  %s n=%d round %d %-7s %s" % (mode, n, rnd, v, json.dumps(
                        {k: round(x, 2) for k, x in figures(r).items()})), file=sys.stderr)
            cell = [row for row in rows if row["tasks"] == n and row["mode"] == mode]
            for v in VARIANTS:
                fs = [row["figures"] for row in cell if row["variant"] == v]
                summary["%s/%d/%s" % (mode, n, v)] = {
                    k: statistics.median(f[k] for f in fs) for k in fs[0]}
            # The service's CPU per wake-up against the same round's run without profiler.
            for v in VARIANTS[1:]:
                ratios = []
                for rnd in range(a.rounds):
                    by = {row["variant"]: row["figures"] for row in cell if row["round"] == rnd}
                    ratios.append(by[v]["cpu_us_per_wakeup"] / by["off"]["cpu_us_per_wakeup"] - 1)
                summary["%s/%d/%s" % (mode, n, v)]["cpu_per_wakeup_vs_off_pct"] = (
                    100 * statistics.median(ratios))
    cols = [("mode", None), ("tasks", None), ("variant", None), ("wakeups_s", "%.0f"),
            ("loop_cpu_pct", "%.2f"),
            ("cpu_us_per_wakeup", "%.1f"), ("cpu_per_wakeup_vs_off_pct", "%+.1f"),
            ("task_us_tick", "%.1f"), ("gil_hold_us_tick", "%.1f"), ("gil_hold_us_max", "%.0f"),
            ("callback_us_tick", "%.1f"), ("phase2_us_tick", "%.1f"),
            ("sampler_cpu_pct", "%.2f"), ("tasks_seen_tick", "%.0f"),
            ("tasks_walked_tick", "%.1f"), ("read_us", "%.2f"), ("task_samples_s", "%.0f"),
            ("quiet_pct", "%.0f"), ("hooked_pct", "%.0f")]
    print(" ".join("%14s" % c for c, _ in cols))
    for key, f in summary.items():
        vals = key.split("/") + [(fmt % f[c]) if c in f else "-" for c, fmt in cols[3:]]
        print(" ".join("%14s" % x for x in vals))
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as fh:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                       "command": " ".join(["python3"] + sys.argv),
                       "python": platform.python_version(), "summary": summary,
                       "rows": rows}, fh, indent=1)
        print("written: %s" % a.json)


if __name__ == "__main__":
    main()
