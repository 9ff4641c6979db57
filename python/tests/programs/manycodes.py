"""Code objects made and dropped forever: `manycodes.py SECONDS REPORT NAME_BYTES WORK`.

The main thread alone (so that it samples itself) compiles, for SECONDS, one function
after another, each with a unique name and file name of about NAME_BYTES characters
(every other one with lone surrogates in both, as a file name that is not UTF-8 has),
calls it for WORK seconds and drops it: the program keeps none of them, so a
profiler holding the codes it sampled (or their names) would grow with every one. It
prints one JSON line per REPORT seconds: elapsed seconds, codes made, codes still alive
(weak references), RSS (KiB) and what progutil reports of the profiler. Then it drops
everything, sleeps 1 s (the profiler running: its frame cache lets the dead codes go
within a few hundred ticks) and prints a last line with "done": true.
"""

import gc
import json
import os
import sys
import time
import weakref

import progutil

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
REPORT = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
NAME_BYTES = int(sys.argv[3]) if len(sys.argv) > 3 else 100_000
WORK = float(sys.argv[4]) if len(sys.argv) > 4 else 0.005

SOURCE = """
def f(seconds):
    end = monotonic() + seconds
    n = 0
    while monotonic() < end:
        for i in range(50):
            n += i
    return n
"""

alive = set()  # weak references to the codes not freed yet


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def make(n):
    # The names are given to the code after compiling: names that the compiler reads
    # from the source are interned, and CPython 3.12 and later never free interned
    # strings (the program alone would grow).
    pad = "x" * NAME_BYTES
    ns = {"monotonic": time.monotonic}
    exec(compile(SOURCE, "gen.py", "exec"), ns)
    f = ns.pop("f")
    odd = "\udc80" if n % 2 else ""
    f.__code__ = f.__code__.replace(co_name="f-%d" % n, co_qualname="f-%d%s-%s" % (n, odd, pad),
                                    co_filename="/gen/%d%s/%s.py" % (n, odd, pad))
    alive.add(weakref.ref(f.__code__, alive.discard))
    return f


def report(start, made, **extra):
    print(json.dumps({"t": round(time.monotonic() - start, 3), "codes": made,
                      "alive": len(alive), "rss_kb": rss_kb(), **progutil.sampler_info(),
                      **extra}), flush=True)


def main():
    start = time.monotonic()
    end = start + SECONDS
    next_report = start + REPORT
    made = 0
    while time.monotonic() < end:
        f = make(made)
        f(WORK)
        del f
        made += 1
        if time.monotonic() >= next_report:
            report(start, made)
            next_report += REPORT
    gc.collect()
    report(start, made)
    time.sleep(1.0)
    gc.collect()
    report(start, made, done=True)


if __name__ == "__main__":
    main()
