"""pprofkit: pprof profiles from Python, with bounded memory and no lost samples.

A Recorder aggregates samples into a window; export() (or the background exporter,
started by start()) swaps the window and encodes it as a pprof profile (gzip, zstd or
uncompressed) for `go tool pprof`, files, Datadog or Pyroscope. Samples are built with a
Sample (one per thread): start(), push_frame(), push_label(), set_value(), flush(); or
record() in one call. docs/python.md is the manual.
"""

from . import _native

if not _native._main_interpreter():
    raise ImportError("pprofkit can only be imported in the main interpreter")

from ._native import (
    VERSION,
    ClosedError,
    CompressError,
    Error,
    Export,
    InvalidArgumentError,
    OutOfMemoryError,
    Recorder,
    Sample,
    Sampler,
    StateError,
    SystemCallError,
    UploadSink,
    now_ns,
    strerror,
)
from .profiler import (
    CPU_TIME,
    SAMPLES,
    WALL_TIME,
    Profiler,
    current,
    profile,
    start,
    stop,
    tag,
)

__version__ = VERSION

# The library's error codes, PPK_OK and PPK_E*: the values of Error.code.
globals().update({k: getattr(_native, k) for k in dir(_native) if k.startswith("PPK_")})

__all__ = [
    "CPU_TIME",
    "ClosedError",
    "CompressError",
    "Error",
    "Export",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "Profiler",
    "Recorder",
    "SAMPLES",
    "Sample",
    "Sampler",
    "StateError",
    "SystemCallError",
    "UploadSink",
    "VERSION",
    "WALL_TIME",
    "current",
    "now_ns",
    "profile",
    "start",
    "stop",
    "strerror",
    "tag",
]
