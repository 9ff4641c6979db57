"""What the test programs report about the profiler running them (for the tests'
tolerances): its rate, the sampler's and the recorder's statistics so far and when they
were read (time.monotonic_ns()), or {} when none runs;
the sampler's statistics once it stopped (report_at_stop); the hook passes it ran and a
wait for more (hook_passes, hook_passes_after); and spin(), the CPU loop of the programs
that need no function of their own for it."""

import json
import os
import sys
import time


def spin(seconds):
    """A pure-Python CPU loop of `seconds` (wall time)."""
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for i in range(500):
            n += i
    return n


def sampler_info():
    try:
        import pprofkit
    except ImportError:
        return {}
    p = pprofkit.current()
    if p is None:
        return {}
    return {"rate": p.rate, "sampler": p.sampler.stats(), "recorder": p.recorder.stats(),
            "now_ns": time.monotonic_ns()}


def hook_passes():
    """The sampler's hook passes so far (task_ticks_hooked), or None when no profiler
    runs."""
    return sampler_info().get("sampler", {}).get("task_ticks_hooked")


async def hook_passes_after(count):
    """Waits (at most 20 s) until the sampler has run `count` hook passes since the
    call: passes that began after the state the program built before it (those on an
    empty task set at startup do not count). At once when no profiler runs."""
    import asyncio
    before = hook_passes()
    for _ in range(2000):
        if before is None or hook_passes() >= before + count:
            return
        await asyncio.sleep(0.01)


def report_at_stop():
    """Prints, when the profiler stops (at exit or os._exit, after the program's last
    line; in a forked child too), one JSON line: {"at_stop": the sampler's final
    statistics, "pid", "now_ns": time.monotonic_ns() then}. No sample is taken after
    it. Nothing when no profiler runs."""
    try:
        import pprofkit
    except ImportError:
        return
    p = pprofkit.current()
    if p is None:
        return
    before = p.on_stop

    def on_stop(summary):
        print(json.dumps({"at_stop": summary["sampler"], "pid": os.getpid(),
                          "now_ns": time.monotonic_ns()}), file=sys.stdout, flush=True)
        if before is not None:
            before(summary)

    p.on_stop = on_stop
