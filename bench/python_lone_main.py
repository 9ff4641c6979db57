"""A main thread alone computing for SECONDS under a Profiler (no output files), at the
CPU budget BUDGET (%, default 0: the full rate). Prints one line: the sampler's ticks,
its thread's CPU time a tick, what the budget charged the main thread's samples of
itself a tick, and the ticks that needed no pass: the cost of a tick of a
single-threaded program, for comparing builds.

    PYTHONPATH=build/python/py3.11.2 python3 bench/python_lone_main.py SECONDS [BUDGET]
"""

import sys
import time

import pprofkit


def spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
    budget = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    p = pprofkit.Profiler(out_dir=None, cpu_budget=budget)
    p.start()
    spin(seconds)
    s = p.stop()["sampler"]
    ticks = s["ticks"]
    print("ticks %d sampler %.1f us/tick callback charged %.1f us/tick without gil %d" % (
        ticks, s["cpu_ns"] / ticks / 1e3, s["main_callback_charged_ns_total"] / ticks / 1e3,
        s["ticks_without_gil"]))


if __name__ == "__main__":
    main()
