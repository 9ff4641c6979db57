"""CPU work at the bottom of a recursion: `work.py [--seconds S] [--depth D] [args...]`.
Prints a JSON line with sys.argv and __name__ (run as a script or with -m) at the start,
and one with what progutil reports about the profiler and the time (time_ns) at the end."""

import json
import sys
import time

import progutil


def deep_leaf(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for i in range(500):
            n += i
    return n


def recurse(depth, seconds):
    if depth <= 1:
        return deep_leaf(seconds)
    return recurse(depth - 1, seconds)


def main():
    seconds, depth = 0.3, 1
    args = sys.argv[1:]
    if "--seconds" in args:
        seconds = float(args[args.index("--seconds") + 1])
    if "--depth" in args:
        depth = int(args[args.index("--depth") + 1])
    print(json.dumps({"argv": sys.argv, "name": __name__}), flush=True)
    recurse(depth, seconds)
    print(json.dumps(dict(progutil.sampler_info(), time_ns=time.time_ns())), flush=True)


if __name__ == "__main__":
    main()
