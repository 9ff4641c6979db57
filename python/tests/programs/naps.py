"""A main thread alone that computes WORK seconds (CPU time) and sleeps NAP seconds in
turn, for SECONDS: `naps.py SECONDS WORK NAP`. Prints one JSON line: its CPU time in
work() and what progutil reports."""

import json
import sys
import time

import progutil


def work(seconds):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        n += 1
    return n


def nap(seconds):
    time.sleep(seconds)


if __name__ == "__main__":
    seconds, w, s = (float(x) for x in sys.argv[1:4])
    end = time.monotonic() + seconds
    cpu = 0
    while time.monotonic() < end:
        c0 = time.thread_time_ns()
        work(w)
        cpu += time.thread_time_ns() - c0
        nap(s)
    print(json.dumps(dict(progutil.sampler_info(), work_cpu_ns=cpu)), flush=True)
