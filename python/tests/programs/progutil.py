"""What the test programs report about the profiler running them (for the tests'
tolerances): its rate, the sampler's and the recorder's statistics so far, or {} when none runs."""


def sampler_info():
    try:
        import pprofkit
    except ImportError:
        return {}
    p = pprofkit.current()
    if p is None:
        return {}
    return {"rate": p.rate, "sampler": p.sampler.stats(), "recorder": p.recorder.stats()}
