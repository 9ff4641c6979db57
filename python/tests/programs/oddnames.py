"""Names that UTF-8 cannot encode (lone surrogates, as Python decodes a file name that
is not UTF-8): `oddnames.py SECONDS`. A thread named "worker-\\udcff" runs, under
pprofkit.tag(label="v\\udc80") (when a profiler runs), a function whose code has the
qualified name "odd\\udc80name" and the file name "/nonexistent/\\udcff.py", which
computes for SECONDS. Prints one JSON line with what progutil reports and the CPU time
of the thread's body (odd_cpu_ns)."""

import json
import sys
import threading
import time

import progutil

SOURCE = """
def odd(seconds):
    end = monotonic() + seconds
    n = 0
    while monotonic() < end:
        n += 1
    return n
"""


def main():
    seconds = float(sys.argv[1])
    ns = {"monotonic": time.monotonic}
    exec(compile(SOURCE, "/nonexistent/\udcff.py", "exec"), ns)
    odd = ns["odd"]
    odd.__code__ = odd.__code__.replace(co_qualname="odd\udc80name")

    cpu = {}

    def body():
        t0 = time.thread_time_ns()
        try:
            import pprofkit
            with pprofkit.tag({"k\udcff": "v\udc80"}):
                odd(seconds)
        except ImportError:
            odd(seconds)
        cpu["odd_cpu_ns"] = time.thread_time_ns() - t0

    t = threading.Thread(target=body, name="worker-\udcff")
    t.start()
    t.join()
    print(json.dumps(dict(progutil.sampler_info(), **cpu)), flush=True)


if __name__ == "__main__":
    main()
