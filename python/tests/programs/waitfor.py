"""asyncio.wait_for of a task, for RUN (argv[1]) seconds: "forer" awaits
asyncio.wait_for(waited_for, HOUR), where "waited-for" waits in asyncio.sleep. On 3.11
wait_for adds a functools.partial to the task's done callbacks that sets a future the
forer waits on; on 3.12 and later the forer awaits the task itself. Both are cancelled
at the end. Prints one JSON line: their lifetime (ns) and the profiler's figures.
"""

import asyncio
import json
import sys
import time

import progutil

RUN = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
HOUR = 3600


async def awaited():
    await asyncio.sleep(HOUR)


async def forer(t):
    await asyncio.wait_for(t, HOUR)


async def main():
    start = time.monotonic_ns()
    waited = asyncio.create_task(awaited(), name="waited-for")
    tasks = [waited, asyncio.create_task(forer(waited), name="forer")]
    await asyncio.sleep(RUN)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(json.dumps({"lifetime_ns": time.monotonic_ns() - start, **progutil.sampler_info()}),
          flush=True)


asyncio.run(main())
