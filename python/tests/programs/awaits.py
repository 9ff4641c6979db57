"""asyncio tasks waiting in different ways, for test_tasks.py, for RUN (argv[1]) seconds
(further arguments: EPHEMERAL, then "idle", "thread" and/or "busy", below):

- "sleeper": asyncio.sleep; "half-sleeper": the same, cancelled halfway through;
  "getter": asyncio.Queue.get; "spinner" (unless argv[3] is "idle"): CPU work in steps,
  each followed by asyncio.sleep(0) (running, or ready to run, all the time);
- "gatherer": asyncio.gather of "gathered-1" and "gathered-2" (each in asyncio.sleep);
- "grouper": an asyncio.TaskGroup of "grouped-1" and "grouped-2" (each in asyncio.sleep);
- "waiter": asyncio.wait of "waited-1" and "waited-2" (each in asyncio.sleep);
- "awaiter": awaits the task "awaited" (in asyncio.sleep);
- "late-awaiter": sleeps LATE seconds (longer if the profiler has not finished two ticks
  since "late-awaited" was made: a tick after a long pause, the CPU budget's or the
  host's, would find it awaited already), then awaits "late-awaited" (in asyncio.sleep):
  a task that gets its parent long after its first sample;
- a task whose name holds a lone surrogate ("bad\\udcffname", in asyncio.sleep);
- EPHEMERAL (argv[2]) short tasks ("ephemeral-N"): each created, run to its end and kept
  referenced (so that it stays in asyncio's task set, done) at the start;
- with "thread", a second Python thread that sleeps all along: the main thread is never
  alone, so every tick the sampler takes the GIL from a loop that lets it go for
  moments only (the spinner's steps);
- with "busy", a second Python thread that computes all along: the GIL changes hands
  between it and the loop, and the sampler's pass comes some time after the main thread
  sampled itself at a tick (it waits for the GIL). The profiler's statistics at its stop
  follow as another JSON line (progutil.report_at_stop): a wait for the GIL as the
  program ends is not in those of the first;
- with "slowswitch", CPython's switch interval is 0.5 s instead of 5 ms
  (sys.setswitchinterval): a thread that takes the GIL keeps it that long unless asked
  to let it go;
- with "ownloop", the loop is of a class with a call_soon of its own (calling
  BaseEventLoop's), which the profiler's hook does not cover: its tasks are found by
  scanning;
- with "eager" (3.12 and later), the loop's task factory is asyncio.eager_task_factory:
  a task runs its first step as it is made, not scheduled by call_soon.

Every long task is created at once at the start and cancelled at the end. Prints one
JSON line: the lifetime (ns) of each long task and of the half-sleeper, by name (from
before their creation to their last step, which notes the time: the main task, which
cancels them and awaits their end, can run much later, as it waits for the GIL), the
sum of the ephemeral tasks' lifetimes (from before their creation to after their end),
the profiler's figures.
"""

import asyncio
import json
import sys
import threading
import time

import progutil

RUN = float(sys.argv[1]) if len(sys.argv) > 1 else 1.5
EPHEMERAL = int(sys.argv[2]) if len(sys.argv) > 2 else 200
SPIN = "idle" not in sys.argv[3:]  # "idle": no spinner, the loop waits all along
THREAD = "thread" in sys.argv[3:]
BUSY = "busy" in sys.argv[3:]
SLOW_SWITCH = "slowswitch" in sys.argv[3:]
OWN_LOOP = "ownloop" in sys.argv[3:]
EAGER = "eager" in sys.argv[3:]
HOUR = 3600
LATE = 0.3
ENDED = {}  # a long task's name: the time of its end (monotonic ns)
LATE_AT = {}  # "ticks": the profiler's ticks when "late-awaited" was made; "awaited":
              # when "late-awaiter" began to await it (monotonic ns)


class ending:
    """`with ending():` around a task's body notes the time of the task's last step (its
    end) under its name in ENDED."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        ENDED[asyncio.current_task().get_name()] = time.monotonic_ns()


async def sleeper():
    with ending():
        await asyncio.sleep(HOUR)


async def getter(q):
    with ending():
        await q.get()


def spin_step():
    progutil.spin(0.002)


async def spinner():
    with ending():
        while True:
            spin_step()
            await asyncio.sleep(0)


async def gathered():
    with ending():
        await asyncio.sleep(HOUR)


async def gatherer():
    with ending():
        await asyncio.gather(asyncio.create_task(gathered(), name="gathered-1"),
                             asyncio.create_task(gathered(), name="gathered-2"))


async def grouped():
    with ending():
        await asyncio.sleep(HOUR)


async def grouper():
    with ending():
        async with asyncio.TaskGroup() as tg:
            tg.create_task(grouped(), name="grouped-1")
            tg.create_task(grouped(), name="grouped-2")


async def waited():
    with ending():
        await asyncio.sleep(HOUR)


async def waiter(children):
    with ending():
        children += [asyncio.create_task(waited(), name="waited-%d" % i) for i in (1, 2)]
        await asyncio.wait(children)


async def awaited():
    with ending():
        await asyncio.sleep(HOUR)


async def awaiter(t):
    with ending():
        await t


def ticks():
    return progutil.sampler_info().get("sampler", {}).get("ticks")


async def late_awaiter(t):
    with ending():
        await asyncio.sleep(LATE)
        if LATE_AT["ticks"] is not None:
            while ticks() < LATE_AT["ticks"] + 2:
                await asyncio.sleep(0.01)
        LATE_AT["awaited"] = time.monotonic_ns()
        await t


async def ephemeral(i):
    return i


class OwnLoop(asyncio.SelectorEventLoop):
    def call_soon(self, callback, *args, context=None):
        return super().call_soon(callback, *args, context=context)


async def main():
    if EAGER:
        asyncio.get_running_loop().set_task_factory(asyncio.eager_task_factory)
    ephemeral_ns = 0
    done = []
    for i in range(EPHEMERAL):
        began = time.monotonic_ns()
        t = asyncio.create_task(ephemeral(i), name="ephemeral-%d" % i)
        done.append(t)
        await t
        ephemeral_ns += time.monotonic_ns() - began

    q = asyncio.Queue()
    waited_tasks = []  # asyncio.wait does not cancel them with the waiter
    start = time.monotonic_ns()
    awaited_task = asyncio.create_task(awaited(), name="awaited")
    late_task = asyncio.create_task(awaited(), name="late-awaited")
    LATE_AT["ticks"] = ticks()
    tasks = [asyncio.create_task(sleeper(), name="sleeper"),
             asyncio.create_task(getter(q), name="getter"),
             asyncio.create_task(gatherer(), name="gatherer"),
             asyncio.create_task(grouper(), name="grouper"),
             asyncio.create_task(waiter(waited_tasks), name="waiter"),
             awaited_task, asyncio.create_task(awaiter(awaited_task), name="awaiter"),
             late_task, asyncio.create_task(late_awaiter(late_task), name="late-awaiter"),
             asyncio.create_task(sleeper(), name="bad\udcffname")]
    if SPIN:
        tasks.append(asyncio.create_task(spinner(), name="spinner"))
    half_start = time.monotonic_ns()
    half = asyncio.create_task(sleeper(), name="half-sleeper")
    await asyncio.sleep(RUN / 2)
    half.cancel()
    await asyncio.gather(half, return_exceptions=True)
    await asyncio.sleep(RUN / 2)
    tasks += waited_tasks
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    # Every task created since start has ended (the children with their parents).
    assert all(t.done() for t in done)
    lifetimes = {name: end - (half_start if name == "half-sleeper" else start)
                 for name, end in ENDED.items()}
    print(json.dumps({"lifetimes_ns": lifetimes, "ephemeral_ns": ephemeral_ns,
                      "late_ns": LATE_AT.get("awaited", time.monotonic_ns()) - start,
                      "ephemeral": EPHEMERAL, **progutil.sampler_info()}), flush=True)
    await asyncio.sleep(0.3)  # the done ephemeral tasks stay in the task set meanwhile
    done.clear()


if SLOW_SWITCH:
    sys.setswitchinterval(0.5)
if THREAD:
    threading.Thread(target=time.sleep, args=(HOUR,), daemon=True, name="idle").start()
if BUSY:
    progutil.report_at_stop()
    threading.Thread(target=progutil.spin, args=(HOUR,), daemon=True, name="busy").start()
with asyncio.Runner(loop_factory=OwnLoop if OWN_LOOP else None) as runner:
    runner.run(main())
