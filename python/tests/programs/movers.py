"""Tasks that move while many others wait: `movers.py WAITERS MOVERS [eager]`. WAITERS
tasks sleep all along; once the profiler's ticks are hook passes again after the
waiters were made (it has read every waiter once; 20 s at most), MOVERS tasks each wait
FIRST seconds in first() then SECOND seconds in second() (asyncio.sleep), one after the
other. With "eager" (3.12 and later), the loop's task factory is
asyncio.eager_task_factory: a mover's first step, to its wait in first(), runs as it is
made, not scheduled by the loop. Prints one JSON line: the movers' times in each (ns,
measured around each await) and what progutil reports."""

import asyncio
import json
import sys
import time

import progutil

FIRST, SECOND = 0.4, 0.8


async def first():
    await asyncio.sleep(FIRST)


async def second():
    await asyncio.sleep(SECOND)


async def mover(times):
    t0 = time.monotonic_ns()
    await first()
    t1 = time.monotonic_ns()
    await second()
    times.append((t1 - t0, time.monotonic_ns() - t1))


async def waiter():
    await asyncio.sleep(3600)


async def main(waiters, movers, eager):
    if eager:
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)
    idle = [asyncio.create_task(waiter(), name="waiter-%d" % i) for i in range(waiters)]
    # Hook passes that began before the waiters were made (on an empty task set, while
    # the program started) do not count: the marks of so many new tasks stop them
    # until the passes have read every waiter.
    await progutil.hook_passes_after(1)
    times = []
    await asyncio.gather(*[asyncio.create_task(mover(times), name="mover-%d" % i)
                           for i in range(movers)])
    for t in idle:
        t.cancel()
    await asyncio.gather(*idle, return_exceptions=True)
    return times


if __name__ == "__main__":
    times = asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), "eager" in sys.argv[3:]))
    print(json.dumps(dict(progutil.sampler_info(), first_ns=sum(a for a, _ in times),
                          second_ns=sum(b for _, b in times))), flush=True)
