"""A task whose await chain is DEPTH coroutines deep, each a function of its own name
(d0 awaits asyncio.sleep, d1 awaits d0, ...), waiting for SECONDS: `deepawait.py DEPTH
SECONDS`. Prints one JSON line: what progutil reports."""

import asyncio
import json
import sys

import progutil


def chain(depth):
    ns = {"asyncio": asyncio}
    exec("async def d0(s):\n    await asyncio.sleep(s)\n", ns)
    for i in range(1, depth):
        exec("async def d%d(s):\n    await d%d(s)\n" % (i, i - 1), ns)
    return ns["d%d" % (depth - 1)]


async def main(depth, seconds):
    await asyncio.create_task(chain(depth)(seconds), name="deep-task")


if __name__ == "__main__":
    depth, seconds = int(sys.argv[1]), float(sys.argv[2])
    sys.setrecursionlimit(depth * 2 + 1000)
    asyncio.run(main(depth, seconds))
    print(json.dumps(progutil.sampler_info()), flush=True)
