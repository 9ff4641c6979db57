"""A thread that starts threads one after another: `starts.py SECONDS [thread]`. The main
thread (with `thread`, a thread named "starter" that the main thread joins) starts a
thread that returns at once and joins it, again and again, for SECONDS, so that at most
ticks a thread is being started (its thread state already in the interpreter's list,
the thread itself not yet running). Prints one JSON line: the threads started, the
loop's wall time (ns), and what progutil reports two ticks after the loop's end (its
longest interval between ticks then includes the one that spans the loop's end)."""

import json
import sys
import threading
import time

import progutil


def nothing():
    pass


def loop(seconds, out):
    t0 = time.monotonic_ns()
    n = 0
    while time.monotonic_ns() - t0 < seconds * 1e9:
        t = threading.Thread(target=nothing)
        t.start()
        t.join()
        n += 1
    out.update(started=n, loop_ns=time.monotonic_ns() - t0)


def main():
    seconds = float(sys.argv[1])
    out = {}
    if sys.argv[2:] == ["thread"]:
        starter = threading.Thread(target=loop, args=(seconds, out), name="starter")
        starter.start()
        starter.join()
    else:
        loop(seconds, out)
    info = progutil.sampler_info()
    if info:
        ticks = info["sampler"]["ticks"]
        deadline = time.monotonic() + 10
        while info["sampler"]["ticks"] < ticks + 2 and time.monotonic() < deadline:
            time.sleep(0.005)
            info = progutil.sampler_info()
    print(json.dumps(dict(info, **out)), flush=True)


if __name__ == "__main__":
    main()
