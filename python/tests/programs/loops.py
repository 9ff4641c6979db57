"""N threads, each running an event loop of its own at the same time, whose one task
(named "sleeper-I", in thread "loop-I") sleeps SECONDS. `loops.py N SECONDS`. Prints
one JSON line: the shortest sleeper lifetime (ns) and what progutil reports."""

import asyncio
import json
import sys
import threading
import time

import progutil


def main(n, seconds):
    lifetimes = []
    everyone = threading.Barrier(n)

    async def sleeper():
        await asyncio.sleep(seconds)

    async def loop_main():
        everyone.wait()  # every loop exists before any task begins to wait
        t0 = time.monotonic_ns()
        await asyncio.create_task(sleeper(), name="sleeper-%s" % threading.current_thread().name[5:])
        lifetimes.append(time.monotonic_ns() - t0)

    threads = [threading.Thread(target=asyncio.run, args=(loop_main(),), name="loop-%d" % i)
               for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return min(lifetimes)


if __name__ == "__main__":
    n, seconds = int(sys.argv[1]), float(sys.argv[2])
    shortest = main(n, seconds)
    print(json.dumps(dict(progutil.sampler_info(), lifetime_ns=shortest)), flush=True)
