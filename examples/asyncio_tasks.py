"""An asyncio service that gives every task a name of its own, forever.

This is the workload pprofkit exists for: a profiler that keeps every task name it has
ever seen grows without bound here. The service accepts "requests" at a steady rate;
each request is a task named after its id (request-<n>-<kind>), and does one of:
  - parse: CPU-heavy, hashing and JSON in the event loop's thread;
  - fetch: waits on a fake backend (asyncio.sleep);
  - render: a bit of CPU, a wait, a bit of CPU;
and a thread pool does blocking "disk" work beside the loop. Every --report seconds it
prints how many tasks it has created and its RSS.

Run it under the profiler:
    python -m pprofkit run --export-period 10 examples/asyncio_tasks.py --seconds 60
"""

import argparse
import asyncio
import concurrent.futures
import hashlib
import json
import os
import random
import time


def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def parse_payload(n):
    doc = {"id": n, "items": [{"k": i, "v": str(i * n)} for i in range(40)]}
    text = json.dumps(doc)
    digest = text.encode()
    for _ in range(60):
        digest = hashlib.sha256(digest).digest()
    return json.loads(text)["id"], digest


def read_disk(n):
    time.sleep(0.002)
    return n


async def parse(n):
    parse_payload(n)


async def fetch(n):
    await asyncio.sleep(random.uniform(0.002, 0.03))


async def render(n, pool):
    parse_payload(n)
    await asyncio.get_running_loop().run_in_executor(pool, read_disk, n)
    await asyncio.sleep(0.005)
    parse_payload(n)


async def serve(seconds, rate, report):
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="disk")
    start = loop.time()
    next_report = start + report
    created = 0
    pending = set()
    kinds = ("parse", "fetch", "render")
    while seconds <= 0 or loop.time() - start < seconds:
        # Requests arrive in small batches, `rate` a second on average.
        for _ in range(10):
            kind = kinds[created % 3]
            coro = render(created, pool) if kind == "render" else (
                parse(created) if kind == "parse" else fetch(created))
            task = asyncio.create_task(coro, name="request-%d-%s" % (created, kind))
            pending.add(task)
            task.add_done_callback(pending.discard)
            created += 1
        await asyncio.sleep(10 / rate)
        if loop.time() >= next_report:
            print("asyncio_tasks: %.0f s, %d tasks created, %d running, RSS %d KiB"
                  % (loop.time() - start, created, len(pending), rss_kb()), flush=True)
            next_report += report
    await asyncio.gather(*pending)
    pool.shutdown()
    print("asyncio_tasks: done, %d tasks created, RSS %d KiB" % (created, rss_kb()), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10, help="how long (0: forever)")
    ap.add_argument("--rate", type=float, default=2000, help="tasks created per second")
    ap.add_argument("--report", type=float, default=5, help="seconds between reports")
    args = ap.parse_args()
    asyncio.run(serve(args.seconds, args.rate, args.report))


if __name__ == "__main__":
    main()
