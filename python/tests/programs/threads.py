"""Three CPU-bound threads, each with a hot function of its own, and a sleeping one;
with `main-busy` after the seconds, the main thread computes in a hot function of its own
too (main_hot) before it joins them; with `crowd`, five more CPU-bound threads
(crowd-0 .. crowd-4, in crowd_hot), and every thread, once its body is done and
measured, waits LINGER seconds (0.5, or the third argument) without running before it
ends (the profiler then sees each idle before it goes).

Prints one JSON line on stdout: per thread (by name) its ident, native id, lifetime and
CPU time in its body, and its CPU clock at the end (measured inside the thread, in ns;
with `crowd`, once more after the wait: cpu_end_ns), and
the sampler's statistics at the end of the program (when a profiler runs), for the tests'
tolerances; with `main-busy`, a second line when the profiler stops, with the sampler's
final statistics (progutil.report_at_stop: the main thread is sampled until then).
"""

import json
import sys
import threading
import time

import progutil

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
MODE = sys.argv[2] if len(sys.argv) > 2 else ""
LINGER = float(sys.argv[3]) if len(sys.argv) > 3 else 0.5
results = {}
linger = threading.Event()


def alpha_hot(deadline):
    n = 0
    while time.monotonic() < deadline:
        for i in range(2000):
            n += i * i
    return n


def beta_hot(deadline):
    s = ""
    while time.monotonic() < deadline:
        for i in range(300):
            s = str(i) + s[:50]
    return s


def gamma_hot(deadline):
    d = {}
    while time.monotonic() < deadline:
        for i in range(1000):
            d[i % 97] = d.get(i % 89, 0) + i
    return d


def main_hot(deadline):
    n = 0
    while time.monotonic() < deadline:
        for i in range(1500):
            n ^= i << 3
    return n


def crowd_hot(deadline):
    n = 0
    while time.monotonic() < deadline:
        for i in range(1000):
            n += i & 7
    return n


def nap(deadline):
    while time.monotonic() < deadline:
        time.sleep(0.05)


def body(fn, deadline):
    t0, c0 = time.monotonic_ns(), time.thread_time_ns()
    fn(deadline)
    me = threading.current_thread()
    results[me.name] = {"ident": me.ident, "native_id": me.native_id,
                        "lifetime_ns": time.monotonic_ns() - t0,
                        "cpu_ns": time.thread_time_ns() - c0,
                        "cpu_total_ns": time.thread_time_ns()}
    if MODE == "crowd":
        linger.wait()
        # Its clock as it ends: the bound of what a profile can charge it. Between the
        # two readings it usually runs 0.03-0.2 ms (ASan), but an allocation there can
        # start a full garbage collection (4.4 ms under ASan here): one thread's profile
        # held 5.2 ms more than its clock at the end of its body.
        results[me.name]["cpu_end_ns"] = time.thread_time_ns()


def main():
    # A GIL switch every 1 ms rather than 5: the sampler then waits less for the GIL
    # among three CPU-bound threads, and the tests' tolerances stay small.
    sys.setswitchinterval(0.001)
    if MODE == "main-busy":
        progutil.report_at_stop()
    deadline = time.monotonic() + SECONDS
    bodies = [("worker-alpha", alpha_hot), ("worker-beta", beta_hot),
              ("worker-gamma", gamma_hot), ("sleeper", nap)]
    if MODE == "crowd":
        bodies += [("crowd-%d" % i, crowd_hot) for i in range(5)]
    threads = [threading.Thread(target=body, args=(fn, deadline), name=name)
               for name, fn in bodies]
    for t in threads:
        t.start()
    if MODE == "main-busy":
        body(main_hot, deadline)
    if MODE == "crowd":
        while len(results) < len(threads):
            time.sleep(0.01)
        time.sleep(LINGER)
        linger.set()
    for t in threads:
        t.join()
    out = dict(progutil.sampler_info(), threads=results)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
