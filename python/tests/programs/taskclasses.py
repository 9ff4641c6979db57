"""Tasks of classes of the program's, on an event loop of a class of the program's, each
class with a __getattr__ (called only for names that the usual lookup does not find),
waiting for RUN (argv[1]) seconds: "c-task" (a subclass of the C asyncio.Task) and
"py-task" (of the pure-Python asyncio.tasks._PyTask), both in asyncio.sleep. Prints one
JSON line: their lifetime (ns) and the profiler's figures.
"""

import asyncio
import json
import sys
import time

import progutil

RUN = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0


class Lookups:
    def __getattr__(self, name):
        raise AttributeError(name)


class CTask(Lookups, asyncio.Task):
    pass


class PyTask(Lookups, asyncio.tasks._PyTask):
    pass


class Loop(Lookups, asyncio.SelectorEventLoop):
    pass


async def sleeper():
    await asyncio.sleep(RUN)


async def main():
    loop = asyncio.get_running_loop()
    start = time.monotonic_ns()
    await asyncio.gather(CTask(sleeper(), loop=loop, name="c-task"),
                         PyTask(sleeper(), loop=loop, name="py-task"))
    print(json.dumps({"lifetime_ns": time.monotonic_ns() - start, **progutil.sampler_info()}),
          flush=True)


loop = Loop()
loop.run_until_complete(main())
loop.close()
