"""asyncio tasks with names of their own: three "crunch" tasks doing CPU work in steps
of STEP seconds (4, 8 and 12 steps: 1 : 2 : 3), one after the other (each awaits the one
before it, and yields to the loop between its steps), and sleeping "nap" tasks.

Each step is longer than 10 ms, so that on every CPython version the sampler sees the
event loop's thread inside the step (on 3.11 and 3.12 the main thread is sampled when
the sampler gets the GIL, which a running thread gives up every 5 ms). Prints one JSON
line: each task's name and the CPU time it spent in its steps (ns, measured here).
"""

import asyncio
import json
import sys
import time

import progutil

STEP = float(sys.argv[1]) if len(sys.argv) > 1 else 0.05
cpu = {}


def crunch_step(seconds):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        for i in range(500):
            n += i * i
    return n


async def crunch(steps, after):
    if after is not None:
        await after
    name = asyncio.current_task().get_name()
    for _ in range(steps):
        c0 = time.thread_time_ns()
        crunch_step(STEP)
        cpu[name] = cpu.get(name, 0) + time.thread_time_ns() - c0
        await asyncio.sleep(0)


async def nap(seconds):
    await asyncio.sleep(seconds)


async def main():
    tasks = []
    for k in (4, 8, 12):
        tasks.append(asyncio.create_task(crunch(k, tasks[-1] if tasks else None),
                                         name="crunch-%d" % k))
    tasks += [asyncio.create_task(nap(0.2 * (i + 1)), name="nap-%d" % i) for i in range(3)]
    await asyncio.gather(*tasks)
    print(json.dumps(dict(progutil.sampler_info(), cpu_ns=cpu)), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
