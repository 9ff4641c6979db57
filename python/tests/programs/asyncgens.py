"""A task that waits inside a chain of DEPTH async generators, for SECONDS: `asyncgens.py
DEPTH SECONDS`. The task "consumer" runs `consume`, whose `async for` iterates g<DEPTH-1>;
each g<i> iterates g<i-1> with `async for`, and g0 awaits asyncio.sleep. Each `async
for` awaits its generator's asend() object (__anext__). Prints one JSON line: what
progutil reports."""

import asyncio
import json
import sys

import progutil


def chain(depth):
    ns = {"asyncio": asyncio}
    exec("async def g0(s):\n    await asyncio.sleep(s)\n    yield 0\n", ns)
    for i in range(1, depth):
        exec("async def g%d(s):\n    async for x in g%d(s):\n        yield x\n" % (i, i - 1),
             ns)
    return ns["g%d" % (depth - 1)]


async def consume(gen):
    async for _ in gen:
        pass


async def main(depth, seconds):
    await asyncio.create_task(consume(chain(depth)(seconds)), name="consumer")


if __name__ == "__main__":
    depth, seconds = int(sys.argv[1]), float(sys.argv[2])
    asyncio.run(main(depth, seconds))
    print(json.dumps(progutil.sampler_info()), flush=True)
