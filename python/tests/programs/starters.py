"""Tasks never marked, found not started: `starters.py OUT_DIR WAITERS STARTERS`.
WAITERS tasks sleep all along, and STARTERS tasks are made (their first step
scheduled) before the program starts the profiler, so the loop's hook never marks them;
the loop then computes until the profiler's ticks are hook passes (its visits of the
task set have found the starters not started), and each starter waits SECOND seconds
in second(), a move the loop does not mark either (its step was scheduled before).
Prints one JSON line: the starters' time in second() (ns, summed, measured around the
wait) and what progutil reports."""

import asyncio
import json
import sys
import time

import progutil

SECOND = 0.5


async def second():
    await asyncio.sleep(SECOND)


async def starter(times):
    t0 = time.monotonic_ns()
    await second()
    times.append(time.monotonic_ns() - t0)


async def waiter():
    await asyncio.sleep(3600)


async def main(out_dir, waiters, starters):
    idle = [asyncio.create_task(waiter(), name="waiter-%d" % i) for i in range(waiters)]
    await asyncio.sleep(0)  # they wait
    times = []
    started = [asyncio.create_task(starter(times), name="starter-%d" % i)
               for i in range(starters)]
    import pprofkit
    pprofkit.start(out_dir=out_dir, cpu_budget=0)
    deadline = time.monotonic() + 20
    while (progutil.hook_passes() or 0) < 5 and time.monotonic() < deadline:
        progutil.spin(0.01)
    await asyncio.gather(*started)
    for t in idle:
        t.cancel()
    await asyncio.gather(*idle, return_exceptions=True)
    return times


if __name__ == "__main__":
    times = asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
    print(json.dumps(dict(progutil.sampler_info(), second_ns=sum(times))), flush=True)
