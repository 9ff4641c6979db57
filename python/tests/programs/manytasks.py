"""asyncio tasks with unique, long names, as fast as the loops make them, for SECONDS.

LOOPS threads each run an event loop that creates tasks named request-<loop>-<n>-<pad>,
about 4000 bytes each (the library cuts strings at 4096), so that a profiler keeping
every task name it saw would grow by megabytes a second here. Each task works for about
0.1 ms (several times what creating it costs, so that samples find the loops inside
the named tasks rather than in the loop creating them); one in four then sleeps briefly. The main thread prints one JSON line per REPORT seconds:
elapsed seconds, tasks created, RSS (KiB), and what progutil reports of the profiler.
Usage: manytasks.py [SECONDS] [REPORT] [LOOPS]
"""

import asyncio
import json
import os
import sys
import threading
import time

import progutil

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
REPORT = float(sys.argv[2]) if len(sys.argv) > 2 else 0.5
LOOPS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
PAD = "x" * 3980
created = [0] * LOOPS


def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def handle(n):
    s = 0
    for i in range(2000 + n % 200):
        s += i * n
    return s


async def request(n):
    handle(n)
    if n % 4 == 0:
        await asyncio.sleep(0.001)


async def serve(k, end):
    pending = set()
    n = 0
    while time.monotonic() < end:
        for _ in range(50):
            t = asyncio.create_task(request(n), name="request-%d-%09d-%s" % (k, n, PAD))
            pending.add(t)
            t.add_done_callback(pending.discard)
            n += 1
        created[k] = n
        await asyncio.sleep(0)
    await asyncio.gather(*pending)


def report(start, **extra):
    print(json.dumps({"t": round(time.monotonic() - start, 3), "tasks": sum(created),
                      "rss_kb": rss_kb(), **progutil.sampler_info(), **extra}), flush=True)


def main():
    # A GIL switch every 0.5 ms: the sampler, one of LOOPS + 1 threads waiting for the
    # GIL, gets it sooner and samples more often (more names go through the profiler).
    sys.setswitchinterval(0.0005)
    start = time.monotonic()
    end = start + SECONDS
    loops = [threading.Thread(target=asyncio.run, args=(serve(k, end),), name="loop-%d" % k)
             for k in range(LOOPS)]
    for t in loops:
        t.start()
    while time.monotonic() < end:
        time.sleep(max(0.0, min(REPORT, end - time.monotonic())))
        report(start)
    for t in loops:
        t.join()
    report(start, done=True)


if __name__ == "__main__":
    main()
