"""Forks while the sampler has asked the main thread to sample itself and the main thread
has not answered: the request is in CPython's queue of pending calls, which the child
inherits and runs at its first bytecode boundary.

The program registers its at-fork handlers before it imports pprofkit, so that in the
parent its `before` handler runs last, just before fork(): a sort that holds the GIL
for tens of milliseconds without running bytecode (the sampler's ticks meanwhile ask the
main thread and wait for the GIL); and in the child its `after_in_child` handler,
early_child, runs first, before the package's handler starts the child's sampler: the
queued request runs there. (No module imported before the handlers registers one of its
own: early_child is the child's first Python code.) The child's profile must not hold a
sample taken there, whose wall time would count from the parent's previous sample.

Usage: fork_pending.py OUT_DIR [FORKS]. Each child prints one JSON line when it stopped
its profiler: its pid, its sampler's start (started_ns), its clock after the stop
(stopped_ns, time.monotonic_ns()) and the samples its profiler recorded; the parent
then prints the children's pids.
"""

import functools
import json
import os
import sys
import time

OUT_DIR = sys.argv[1]
FORKS = int(sys.argv[2]) if len(sys.argv) > 2 else 4

# ~40 ms of sorting on this machine (more under sanitizers): several ticks at 200 Hz.
values = [(i * 2654435761) % 1000003 / 7.0 for i in range(300_000)]


def early_child():
    """In the child, before the profiler's handler."""
    end = time.monotonic() + 0.005
    while time.monotonic() < end:
        pass


os.register_at_fork(before=functools.partial(sorted, values), after_in_child=early_child)

import pprofkit  # noqa: E402 (after the handlers above)


def child_work(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def main():
    pprofkit.start(out_dir=OUT_DIR, rate=200)
    pids = []
    for _ in range(FORKS):
        child_work(0.02)
        pid = os.fork()
        if pid == 0:
            child_work(0.05)
            summary = pprofkit.stop()
            print(json.dumps({"pid": os.getpid(), "stopped_ns": time.monotonic_ns(),
                              "started_ns": summary["sampler"]["started_ns"],
                              "samples": summary["samples"]}), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        pids.append(pid)
    pprofkit.stop()
    print(json.dumps({"children": pids}), flush=True)


if __name__ == "__main__":
    main()
