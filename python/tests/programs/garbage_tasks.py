"""Unnamed asyncio tasks that are garbage while they wait (each awaits a future that
only its own coroutine holds: task, coroutine and future are a cycle that the cyclic GC
frees), for RUN seconds (argv[1]): batches of BATCH such tasks, each batch started (two
loop iterations: every task waits on its future), then the main thread blocks for
BLOCK seconds in time.sleep while the sampler reads the tasks.

Before each block the GC's threshold is set to the count of tracked objects made since
the last collection plus SLACK: the next few objects that the sampler itself makes while
it reads the tasks (weak references to their futures, their callbacks' lists) schedule
a collection. CPython 3.12 and 3.13 name an unnamed task only when get_name is first
called ("Task-N" formatted then, through PyObject_Str, which runs a scheduled
collection there and then): a sampler that ran it there would free the garbage tasks it
is reading (a crash). Prints one JSON line: the tasks made and the profiler's figures.
"""

import asyncio
import gc
import json
import sys
import time

import progutil

RUN = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
BATCH = 100
BLOCK = 0.05
SLACK = 10


async def waits(fut):
    await fut


async def main():
    loop = asyncio.get_running_loop()
    # "Task was destroyed but it is pending!" for each task the GC frees: not wanted here.
    loop.set_exception_handler(lambda loop, context: None)
    threshold = gc.get_threshold()
    made = 0
    end = time.monotonic() + RUN
    while time.monotonic() < end:
        gc.collect()
        for _ in range(BATCH):
            asyncio.ensure_future(waits(loop.create_future()))  # garbage once it waits
        made += BATCH
        await asyncio.sleep(0)  # the tasks begin: each waits on its future
        await asyncio.sleep(0)
        gc.set_threshold(gc.get_count()[0] + SLACK, *threshold[1:])
        time.sleep(BLOCK)
        gc.set_threshold(*threshold)
    return made


made = asyncio.run(main())
print(json.dumps({"made": made, **progutil.sampler_info()}), flush=True)
