"""CPU work in phases: `phases.py A B C` runs phase_a for A seconds, phase_b for B
seconds, then phase_a again for C seconds, and prints a JSON line with what progutil
reports about the profiler at the end."""

import json
import sys

import progutil


def phase_a(seconds):
    return progutil.spin(seconds)


def phase_b(seconds):
    return progutil.spin(seconds)


def main():
    a, b, c = (float(x) for x in sys.argv[1:4])
    phase_a(a)
    phase_b(b)
    phase_a(c)
    print(json.dumps(progutil.sampler_info()), flush=True)


if __name__ == "__main__":
    main()
