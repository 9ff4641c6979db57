"""The main thread alone: it computes SECONDS, then runs an event loop whose main task
computes SECONDS while another task ("waiter") waits. `alone.py SECONDS`. Prints a JSON
line after each phase: what progutil reports."""

import asyncio
import json
import sys

import progutil


async def main(seconds):
    waiter = asyncio.create_task(asyncio.sleep(3600), name="waiter")
    await asyncio.sleep(0)
    progutil.spin(seconds)
    waiter.cancel()


if __name__ == "__main__":
    seconds = float(sys.argv[1])
    progutil.spin(seconds)
    print(json.dumps(progutil.sampler_info()), flush=True)
    asyncio.run(main(seconds))
    print(json.dumps(progutil.sampler_info()), flush=True)
