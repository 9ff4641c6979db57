"""An asyncio task that waits on a future of its own kind, which wakes the task itself:
`duckfuture.py SECOND [CHURN]`. The task "worker" waits in first() on a Duck (awaitable
the way asyncio.Task accepts: _asyncio_future_blocking, add_done_callback, ...), whose
set_result runs the done callbacks at once instead of scheduling them with the loop;
once the profiler's ticks are hook passes with the worker waiting, the loop calls
set_result, so the worker's wakeup and its next step, to second() (asyncio.sleep for
SECOND seconds), run without a step the loop schedules. With CHURN, as many tasks
"churn-N" wake up every 10 ms all along. Prints one JSON line: the worker's time in
second() (ns, measured around the wait) and what progutil reports."""

import asyncio
import json
import sys
import time

import progutil


class Duck:
    _asyncio_future_blocking = False

    def __init__(self, loop):
        self._loop, self._callbacks, self._done = loop, [], False

    def get_loop(self):
        return self._loop

    def add_done_callback(self, fn, *, context=None):
        self._callbacks.append((fn, context))

    def remove_done_callback(self, fn):
        n = len(self._callbacks)
        self._callbacks = [(f, c) for f, c in self._callbacks if f != fn]
        return n - len(self._callbacks)

    def done(self):
        return self._done

    def cancelled(self):
        return False

    def cancel(self, msg=None):
        return False

    def result(self):
        return None

    def exception(self):
        return None

    def set_result(self, _):
        self._done = True
        for fn, context in self._callbacks:
            if context is None:
                fn(self)
            else:
                context.run(fn, self)

    def __await__(self):
        if not self._done:
            self._asyncio_future_blocking = True
            yield self
        return self.result()


async def first(duck):
    await duck


async def second(seconds):
    await asyncio.sleep(seconds)


async def worker(duck, seconds, times):
    await first(duck)
    t0 = time.monotonic_ns()
    await second(seconds)
    times.append(time.monotonic_ns() - t0)


async def churn():
    while True:
        await asyncio.sleep(0.01)


async def main(seconds, n_churn):
    loop = asyncio.get_running_loop()
    churners = [asyncio.create_task(churn(), name="churn-%d" % i) for i in range(n_churn)]
    duck, times = Duck(loop), []
    task = asyncio.create_task(worker(duck, seconds, times), name="worker")
    await asyncio.sleep(0)  # the worker waits on the duck
    await progutil.hook_passes_after(6)
    loop.call_soon(duck.set_result, None)
    await task
    for t in churners:
        t.cancel()
    await asyncio.gather(*churners, return_exceptions=True)
    return times


if __name__ == "__main__":
    times = asyncio.run(main(float(sys.argv[1]), int(sys.argv[2]) if sys.argv[2:] else 0))
    print(json.dumps(dict(progutil.sampler_info(), second_ns=sum(times))), flush=True)
