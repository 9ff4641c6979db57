"""Threads and asyncio tasks whose names are long and hold a lone surrogate (a name made
from a file name that is not UTF-8): `longnames.py NAME_CHARS COUNT`.

COUNT threads wait on an event, and COUNT tasks sleep, each named "n\\udc80<k>-yyy..."
of about NAME_CHARS characters, for 1 s while the profiler samples them. tracemalloc
measures what is allocated meanwhile (the peak, from before the threads and tasks
start: the names were made before), which is what the sampler makes of the names: their
UTF-8 encodings, kept a pass for a thread's, as long as a waiting task's stack for a
task's. Prints one JSON line: "base", "current" and "peak" (tracemalloc's bytes), and
what progutil reports of the profiler.
"""

import asyncio
import json
import sys
import threading
import tracemalloc

import progutil

NAME_CHARS = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
COUNT = int(sys.argv[2]) if len(sys.argv) > 2 else 8


def main():
    names = ["n\udc80%d-%s" % (k, "y" * NAME_CHARS) for k in range(2 * COUNT)]
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    stop = threading.Event()
    threads = [threading.Thread(target=stop.wait, name=names[k]) for k in range(COUNT)]
    for t in threads:
        t.start()

    async def body():
        tasks = [asyncio.create_task(asyncio.sleep(3600), name=names[COUNT + k])
                 for k in range(COUNT)]
        await asyncio.sleep(1.0)
        measured = tracemalloc.get_traced_memory()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return measured

    current, peak = asyncio.run(body())
    stop.set()
    for t in threads:
        t.join()
    tracemalloc.stop()
    print(json.dumps({"base": base, "current": current, "peak": peak,
                      **progutil.sampler_info()}), flush=True)


if __name__ == "__main__":
    main()
