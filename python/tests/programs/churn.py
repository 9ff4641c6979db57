"""Threads that block and wake at random inside functions made on the fly, so that the
code objects of their stacks die as soon as they return: `churn.py THREADS SECONDS
[spin|shared]`. Each thread, again and again, compiles a chain of new functions (code
objects of their own, one frame each, the last one recursing 6 times), calls it, and at
its end waits 0.1-3 ms (or, with `spin`, computes as long); then drops it. THREADS 0:
the main thread does it, alone. With `shared`, one more thread compiles a chain every 2
ms and the THREADS threads all call the latest one: the same code objects in several
stacks of a pass, and addresses reused as chains are dropped. A sampler that keeps a
sleeping thread's stack from one tick to the next must hold those code objects itself
(under ASan a use after free aborts the program), and let them go (the frame cache
evicts them all the time). Prints a JSON line with the calls made and what progutil
reports."""

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
AGAIN = """
def again_{n}(wait, k):
    return again_{n}(wait, k - 1) if k else wait()
"""
CHAIN = 24


def make_chain(seed, n):
    """A chain of CHAIN new functions, made_N_0 calling made_N_1 ... calling again_N,
    which recurses 6 times and calls wait()."""
    ns = {}
    exec(compile(AGAIN.format(n=n), "<again-%d-%d>" % (seed, n), "exec"), ns)
    for i in reversed(range(CHAIN)):
        call = "made_%d_%d(wait)" % (n, i + 1) if i + 1 < CHAIN else "again_%d(wait, 6)" % n
        src = SOURCE.format(n=n, i=i, call=call)
        exec(compile(src, "<made-%d-%d-%d>" % (seed, n, i), "exec"), ns)
    return ns["made_%d_0" % n]


def churn(seconds, counts, seed, spin=False, shared=None):
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        if shared is None:
            chain = make_chain(seed, n)
        elif shared:
            chain = shared[-1]
        else:
            time.sleep(0.001)
            continue
        pause = rng.uniform(0.0001, 0.003)
        wait = (lambda: progutil.spin(pause)) if spin else (
            lambda: threading.Event().wait(pause))
        chain(wait)
        del chain
        n += 1
    counts[seed] = n


def produce(seconds, shared):
    """Compiles a chain every 2 ms into shared (the latest only)."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        shared[:] = [make_chain(1000, n)]
        n += 1
        time.sleep(0.002)


def main():
    threads, seconds = int(sys.argv[1]), float(sys.argv[2])
    spin = sys.argv[3:] == ["spin"]
    shared = [] if sys.argv[3:] == ["shared"] else None
    counts = {}
    if threads == 0:
        churn(seconds, counts, 0, spin)
    ts = [threading.Thread(target=churn, args=(seconds, counts, i, spin, shared))
          for i in range(threads)]
    if shared is not None:
        ts.append(threading.Thread(target=produce, args=(seconds, shared)))
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    print(json.dumps(dict(progutil.sampler_info(), calls=sum(counts.values()))), flush=True)


if __name__ == "__main__":
    main()
