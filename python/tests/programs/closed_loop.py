"""A task whose loop stops before it starts, then is closed: `closed_loop.py`. A loop
runs until the profiler's ticks are hook passes; then "orphan" is made (its first step
scheduled, so marked) by a coroutine that returns at once, the loop stops and is closed
(its ready queue cleared), and the program drops its reference and sleeps 0.5 s with
the profiler running. Prints one JSON line: whether "orphan" is still alive (something
holds it) and what progutil reports."""

import asyncio
import gc
import json
import time
import weakref

import progutil


async def forever():
    await asyncio.sleep(3600)


async def make_orphan():
    return weakref.ref(asyncio.get_running_loop().create_task(forever(), name="orphan"))


loop = asyncio.new_event_loop()
loop.run_until_complete(progutil.hook_passes_after(3))
ref = loop.run_until_complete(make_orphan())
loop.close()
gc.collect()
time.sleep(0.5)
gc.collect()
print(json.dumps({"alive": ref() is not None, **progutil.sampler_info()}), flush=True)
