"""An event loop that makes N tasks at once, each sleeping SECONDS, and waits for them:
its thread then idles, so most ticks find that no loop thread has run since the last
one. `sleepers.py N SECONDS`. Prints one JSON line: the tasks' lifetime (ns, from
before the first was made to after the last ended) and what progutil reports."""

import asyncio
import json
import sys
import time

import progutil


async def sleeper(seconds):
    await asyncio.sleep(seconds)


async def main(n, seconds):
    tasks = [asyncio.create_task(sleeper(seconds), name="sleeper-%d" % i) for i in range(n)]
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    n, seconds = int(sys.argv[1]), float(sys.argv[2])
    t0 = time.monotonic_ns()
    asyncio.run(main(n, seconds))
    print(json.dumps(dict(progutil.sampler_info(), lifetime_ns=time.monotonic_ns() - t0)),
          flush=True)
