"""A pool of threads that compute in short bursts and block in between, as a server's
worker threads do: `pool.py SECONDS`. Each of the threads "pool-0".."pool-3" calls, for
SECONDS, burst() (a pure-Python loop of ~1 ms) then rest() (a 3 ms wait on an Event
that is never set), measuring the CPU time of its bursts and its own total with its
thread clock; then it blocks until the process ends (it is sampled by the profiler's
last pass). Prints one JSON line: {"threads": {name: {"burst_cpu_ns", "cpu_ns"}}} with
what progutil reports about the profiler."""

import json
import sys
import threading
import time

import progutil


def burst():
    x = 0
    for i in range(20000):
        x += i * i
    return x


def rest(event):
    event.wait(0.003)


def main():
    seconds = float(sys.argv[1])
    out = {}
    done = threading.Barrier(5)

    def work():
        never = threading.Event()
        end = time.monotonic() + seconds
        in_burst = 0
        while time.monotonic() < end:
            t0 = time.thread_time_ns()
            burst()
            in_burst += time.thread_time_ns() - t0
            rest(never)
        out[threading.current_thread().name] = {"burst_cpu_ns": in_burst,
                                                "cpu_ns": time.thread_time_ns()}
        done.wait()
        never.wait()

    for i in range(4):
        threading.Thread(target=work, name="pool-%d" % i, daemon=True).start()
    done.wait()
    print(json.dumps(dict(progutil.sampler_info(), threads=out)), flush=True)


if __name__ == "__main__":
    main()
