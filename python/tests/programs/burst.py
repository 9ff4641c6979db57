"""Tasks woken in a burst while their loop is busy: `burst.py N BUSY SECOND`. N workers
wait in first() on an asyncio.Event; once the profiler's ticks are hook passes again
after the workers were made, the event is set (N wake-ups at once: more marks than the
passes hold, the rest released) and the loop computes for BUSY seconds, the workers
woken but not run; then each worker waits SECOND seconds in second() on another event.
Prints one JSON line: the workers' time in second() (ns, summed, measured around the
wait), what progutil reports, and the sampler's statistics as the event was set
(at_burst) and once the workers ended (at_end)."""

import asyncio
import json
import sys
import time

import progutil


async def first(ev):
    await ev.wait()


async def second(ev):
    await ev.wait()


async def worker(ev1, ev2, times):
    await first(ev1)
    t0 = time.monotonic_ns()
    await second(ev2)
    times.append(time.monotonic_ns() - t0)


async def main(n, busy, second_s):
    ev1, ev2 = asyncio.Event(), asyncio.Event()
    times = []
    workers = [asyncio.create_task(worker(ev1, ev2, times), name="worker-%d" % i)
               for i in range(n)]
    await progutil.hook_passes_after(1)
    at_burst = progutil.sampler_info().get("sampler", {})
    ev1.set()
    progutil.spin(busy)
    await asyncio.sleep(second_s)
    ev2.set()
    await asyncio.gather(*workers)
    return times, at_burst, progutil.sampler_info().get("sampler", {})


if __name__ == "__main__":
    n, busy, second_s = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    times, at_burst, at_end = asyncio.run(main(n, busy, second_s))
    print(json.dumps(dict(progutil.sampler_info(), second_ns=sum(times), at_burst=at_burst,
                          at_end=at_end)), flush=True)
