"""pprofkit: pprof profiles from Python, with bounded memory and no lost samples.

A Recorder aggregates samples into a window; export() (or the background exporter,
started by start()) swaps the window and encodes it as a pprof profile (gzip, zstd or
uncompressed) for `go tool pprof`, files, Datadog or Pyroscope. Samples are built with a
Sample (one per thread): start(), push_frame(), push_label(), set_value(), flush(); or
record() in one call. docs/python.md is the manual.
"""

import os as _os

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
    StateError,
    SystemCallError,
    UploadSink,
    _after_fork_child,
    now_ns,
    strerror,
)

__version__ = VERSION

# Sample types of a sampling profiler, as (type, unit) pairs.
WALL_TIME = ("wall-time", "nanoseconds")
CPU_TIME = ("cpu-time", "nanoseconds")
SAMPLES = ("samples", "count")

# The library empties a forked child's recorders itself; the extension also forgets the
# calls that other threads of the parent had in progress.
_os.register_at_fork(after_in_child=_after_fork_child)

__all__ = [
    "CPU_TIME",
    "ClosedError",
    "CompressError",
    "Error",
    "Export",
    "InvalidArgumentError",
    "OutOfMemoryError",
    "Recorder",
    "SAMPLES",
    "Sample",
    "StateError",
    "SystemCallError",
    "UploadSink",
    "VERSION",
    "WALL_TIME",
    "now_ns",
    "strerror",
]
