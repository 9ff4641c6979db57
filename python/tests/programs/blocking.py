"""A thread that blocks, computes, then blocks again: `blocking.py W C W2` (seconds).
The thread "phased" waits W seconds in waiting_here(), spins C seconds in busy_after(),
then waits W2 seconds in waiting_again(); it measures each phase's duration itself. The
program prints a JSON line with those and what progutil reports about the profiler."""

import json
import sys
import threading
import time

import progutil


def waiting_here(seconds):
    threading.Event().wait(seconds)


def busy_after(seconds):
    return progutil.spin(seconds)


def waiting_again(seconds):
    threading.Event().wait(seconds)


def main():
    w, c, w2 = (float(x) for x in sys.argv[1:4])
    phases = {}

    def body():
        for fn, s in ((waiting_here, w), (busy_after, c), (waiting_again, w2)):
            t0 = time.monotonic_ns()
            fn(s)
            phases[fn.__name__] = time.monotonic_ns() - t0

    t = threading.Thread(target=body, name="phased")
    t.start()
    t.join()
    print(json.dumps(dict(progutil.sampler_info(), phases=phases)), flush=True)


if __name__ == "__main__":
    main()
