"""Tasks made in one step after a burst of others: `latecomers.py N SECONDS`. Once the
profiler's ticks are hook passes, the main task makes N short tasks (each ends at its
first step), then 10 "late" ones that wait SECONDS, all before it yields: the loop marks
every one as it schedules its first step, more marks than a pass holds (with a small
max_tasks_per_tick). Prints one JSON line: each late task's lifetime (ns, from its
making to its end, noted by itself) and what progutil reports."""

import asyncio
import json
import sys
import time

import progutil

ENDED = {}


async def short():
    pass


async def late(seconds):
    try:
        await asyncio.sleep(seconds)
    finally:
        ENDED[asyncio.current_task().get_name()] = time.monotonic_ns()


async def main(n, seconds):
    await progutil.hook_passes_after(1)
    shorts = [asyncio.create_task(short(), name="short-%d" % i) for i in range(n)]
    made = time.monotonic_ns()
    lates = [asyncio.create_task(late(seconds), name="late-%d" % i) for i in range(10)]
    await asyncio.gather(*shorts, *lates)
    return {name: end - made for name, end in ENDED.items()}


if __name__ == "__main__":
    lifetimes = asyncio.run(main(int(sys.argv[1]), float(sys.argv[2])))
    print(json.dumps(dict(progutil.sampler_info(), lifetimes_ns=lifetimes)), flush=True)
