"""A program that starts Python processes: `spawner.py`. The parent spins in
parent_work(), runs this file again as a subprocess (`spawner.py sub`, which spins in
sub_work()), then runs spawned_work() in a multiprocessing "spawn" process. Each process
prints a JSON line: its role, its pid, and what progutil reports about the profiler
running in it ({} when none)."""

import json
import multiprocessing
import os
import subprocess
import sys

import progutil


def report(role, **extra):
    print(json.dumps(dict(progutil.sampler_info(), role=role, pid=os.getpid(), **extra)),
          flush=True)


def parent_work():
    return progutil.spin(0.3)


def sub_work():
    return progutil.spin(0.3)


def spawned_work():
    progutil.spin(0.3)
    report("spawn")


def main():
    if sys.argv[1:] == ["sub"]:
        sub_work()
        report("sub")
        return
    parent_work()
    sub = subprocess.run([sys.executable, os.path.abspath(__file__), "sub"])
    p = multiprocessing.get_context("spawn").Process(target=spawned_work)
    p.start()
    p.join()
    report("parent", sub_status=sub.returncode, spawn_exitcode=p.exitcode, spawn_pid=p.pid)


if __name__ == "__main__":
    main()
