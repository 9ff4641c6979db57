"""A profiled program that forks: an os.fork() child that leaves through os._exit(), and
a multiprocessing child made with the "fork" start method, while the parent works.

Every process prints one JSON line on stdout: its role, pid, its clock at the end of its
work (children: time.monotonic_ns()) and the profiler's statistics; the parent's line also
has its children's pids and exit statuses. Each prints another when its profiler stops
(progutil.report_at_stop).
"""

import json
import multiprocessing
import os
import sys
import time
import warnings

import progutil

# 3.12+ warns that fork() in a multi-threaded process may deadlock (the profiler's threads
# are running): making sure it does not is what the test is for.
warnings.filterwarnings("ignore", category=DeprecationWarning)


def busy(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for i in range(500):
            n += i
    return n


def parent_work(seconds):
    return busy(seconds)


def child_work(seconds):
    return busy(seconds)


def mp_work(seconds):
    busy(seconds)
    print(json.dumps({"role": "mp", "pid": os.getpid(), "now_ns": time.monotonic_ns(),
                      **progutil.sampler_info()}),
          flush=True)


def main():
    progutil.report_at_stop()
    parent_work(0.2)
    sys.stdout.flush()
    t0 = time.monotonic_ns()
    pid = os.fork()
    if pid == 0:
        child_work(0.4)
        print(json.dumps({"role": "fork", "pid": os.getpid(), "now_ns": time.monotonic_ns(),
                          **progutil.sampler_info()}), flush=True)
        os._exit(0)  # the profiler wraps it: the child's last window is written
    parent_work(0.3)
    _, status = os.waitpid(pid, 0)
    ctx = multiprocessing.get_context("fork")
    p = ctx.Process(target=mp_work, args=(0.4,), name="mp-child")
    p.start()
    parent_work(0.2)
    p.join(60)
    print(json.dumps({"role": "parent", "pid": os.getpid(), "fork_pid": pid,
                      "fork_status": os.waitstatus_to_exitcode(status),
                      "mp_pid": p.pid, "mp_exitcode": p.exitcode,
                      "since_fork_ns": time.monotonic_ns() - t0, **progutil.sampler_info()}),
          flush=True)


if __name__ == "__main__":
    main()
