"""A finalizer that stops the profiler's sampler, run by the sampler's own pass:
`stop_in_pass.py SECONDS [profiler]`. A thread makes functions on the fly, runs each once
and drops it; a weak reference to each one's code object calls `sampler.stop()` (with
`profiler`, the profiler's stop(), which must then leave the profiler running) when the
code dies.
The sampler's pass holds the code objects of the frames it saw and lets them go at a
later pass, so some die there (on CPython 3.12 and later the pass may run in the worker
itself): that stop() must fail with RuntimeError (the thread would wait for itself), not
hang. Runs until such a refusal or SECONDS, then prints a JSON line: the refusals, the
callbacks run elsewhere, and what progutil reports."""

import json
import sys
import threading
import time
import weakref

import progutil

SOURCE = "def made_{i}(n):\n    x = 0\n    for k in range(n):\n        x += k\n    return x\n"
result = {"refused": 0, "elsewhere": 0}
dropping = [False]


def on_death(_ref):
    import pprofkit
    if dropping[0]:  # the worker's own `del`: not a pass
        result["elsewhere"] += 1
        return
    p = pprofkit.current()
    try:
        if sys.argv[2:] == ["profiler"]:
            p.stop()
        else:
            p.sampler.stop()
    except RuntimeError:
        result["refused"] += 1
        return
    result["elsewhere"] += 1


def work(end):
    refs = []
    i = 0
    while time.monotonic() < end and not result["refused"]:
        ns = {}
        exec(compile(SOURCE.format(i=i), "made_%d" % i, "exec"), ns)
        f = ns.pop("made_%d" % i)
        refs.append(weakref.ref(f.__code__, on_death))
        f(20000)
        dropping[0] = True
        del f, ns
        dropping[0] = False
        i += 1


def main():
    end = time.monotonic() + float(sys.argv[1])
    t = threading.Thread(target=work, args=(end,), name="worker")
    t.start()
    t.join()
    print(json.dumps(dict(progutil.sampler_info(), **result)), flush=True)


if __name__ == "__main__":
    main()
