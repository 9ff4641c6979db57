"""A task left waiting on an event loop that stops: "orphan" waits while the loop runs
for RUNNING seconds, then the loop's run_until_complete returns and the program sleeps
for IDLE seconds without running it (the task stays pending). Prints one JSON line:
RUNNING and IDLE (ns) and the profiler's figures.
"""

import asyncio
import json
import time

import progutil

RUNNING, IDLE = 0.3, 1.0


async def orphan():
    await asyncio.sleep(3600)


async def main():
    t = asyncio.create_task(orphan(), name="orphan")
    await asyncio.sleep(RUNNING)
    return t


loop = asyncio.new_event_loop()
task = loop.run_until_complete(main())
time.sleep(IDLE)  # the loop is not running: the task waits on nothing that can end
print(json.dumps({"running_ns": int(RUNNING * 1e9), "idle_ns": int(IDLE * 1e9),
                  **progutil.sampler_info()}), flush=True)
task.cancel()
loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
loop.close()
