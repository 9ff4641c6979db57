"""pprofkit.tag() on a thread and on asyncio tasks.

A thread "tagger" runs outside_fn, then inside_fn within tag(phase="inside", n=7), then
outside_fn again. In the main thread an event loop runs a task "tagged-task" whose steps
(tagged_step) run within tag(req="r-1"), and a task "plain-task" (plain_step) without;
the loop runs within tag(req="outer", loop="main"), whose req the task's inner one hides.
Steps are 60 ms of CPU (see tasks.py): 8 a task, so that each step function gets samples
even when a loaded machine stretches the sampler's ticks to ~60 ms.
"""

import asyncio
import threading
import time

import pprofkit


def spin(seconds):
    end = time.thread_time() + seconds
    n = 0
    while time.thread_time() < end:
        for i in range(500):
            n += i
    return n


def outside_fn(seconds):
    return spin(seconds)


def inside_fn(seconds):
    return spin(seconds)


def tagger():
    outside_fn(0.15)
    with pprofkit.tag(phase="inside", n=7):
        inside_fn(0.3)
    outside_fn(0.15)


def tagged_step():
    return spin(0.06)


def plain_step():
    return spin(0.06)


async def tagged(steps):
    with pprofkit.tag({"req": "r-1"}):
        for _ in range(steps):
            tagged_step()
            await asyncio.sleep(0)


async def plain(steps):
    for _ in range(steps):
        plain_step()
        await asyncio.sleep(0)


async def main():
    await asyncio.gather(asyncio.create_task(tagged(8), name="tagged-task"),
                         asyncio.create_task(plain(8), name="plain-task"))


if __name__ == "__main__":
    t = threading.Thread(target=tagger, name="tagger")
    t.start()
    with pprofkit.tag(req="outer", loop="main"):
        asyncio.run(main())
    t.join()
