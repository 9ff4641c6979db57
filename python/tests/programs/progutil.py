"""What the test programs report about the profiler running them (for the tests'
tolerances): its rate, the sampler's and the recorder's statistics so far, or {} when none runs;
and spin(), the CPU loop of the programs that need no function of their own for it."""

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
    return {"rate": p.rate, "sampler": p.sampler.stats(), "recorder": p.recorder.stats()}
