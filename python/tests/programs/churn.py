"""Threads that block and wake at random inside functions made on the fly, so that the
code objects of their stacks die as soon as they return: `churn.py THREADS SECONDS
[spin]`. Each thread, again and again, compiles a chain of new functions (code objects
of their own, one frame each), calls it, and at its end waits 0.1-3 ms (or, with
`spin`, computes as long); then drops it. THREADS 0: the main thread does it, alone. A
sampler that keeps a sleeping thread's stack from one tick to the next must hold those
code objects itself (under ASan a use after free aborts the program), and let them go
(the frame cache evicts them all the time). Prints a JSON line with the calls made and
what progutil reports."""

import json
import random
import sys
import threading
import time

import progutil

SOURCE = """
def made_{n}_{i}(wait):
    return {call}
"""
CHAIN = 24


def churn(seconds, counts, seed, spin=False):
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        # A chain of CHAIN new functions, made_N_0 calling made_N_1 ... calling wait().
        ns = {}
        for i in reversed(range(CHAIN)):
            call = "made_%d_%d(wait)" % (n, i + 1) if i + 1 < CHAIN else "wait()"
            src = SOURCE.format(n=n, i=i, call=call)
            exec(compile(src, "<made-%d-%d-%d>" % (seed, n, i), "exec"), ns)
        pause = rng.uniform(0.0001, 0.003)
        wait = (lambda: progutil.spin(pause)) if spin else (
            lambda: threading.Event().wait(pause))
        ns["made_%d_0" % n](wait)
        n += 1
    counts[seed] = n


def main():
    threads, seconds = int(sys.argv[1]), float(sys.argv[2])
    spin = sys.argv[3:] == ["spin"]
    counts = {}
    if threads == 0:
        churn(seconds, counts, 0, spin)
    ts = [threading.Thread(target=churn, args=(seconds, counts, i, spin))
          for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps(dict(progutil.sampler_info(), calls=sum(counts.values()))), flush=True)


if __name__ == "__main__":
    main()
