"""A thread that waits, computes in C without the GIL, then waits again:
`cwork.py W ITERATIONS W2`. The thread "c-worker" waits W seconds in waiting_before(),
then calls crunch(), one hashlib.pbkdf2_hmac of ITERATIONS iterations (OpenSSL computes
it with the GIL released), then waits W2 seconds in waiting_after(). Meanwhile no other
thread runs Python code (the main thread joins it). It measures crunch()'s CPU time and
its own total with its thread clock, and prints them in a JSON line with what progutil
reports about the profiler."""

import hashlib
import json
import sys
import threading
import time

import progutil


def waiting_before(seconds):
    threading.Event().wait(seconds)


def crunch(iterations):
    return hashlib.pbkdf2_hmac("sha256", b"password", b"salt", iterations)


def waiting_after(seconds):
    threading.Event().wait(seconds)


def main():
    w, iterations, w2 = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    out = {}

    def body():
        waiting_before(w)
        t0 = time.thread_time_ns()
        crunch(iterations)
        out["crunch_cpu_ns"] = time.thread_time_ns() - t0
        waiting_after(w2)
        out["cpu_total_ns"] = time.thread_time_ns()

    t = threading.Thread(target=body, name="c-worker")
    t.start()
    t.join()
    print(json.dumps(dict(progutil.sampler_info(), **out)), flush=True)


if __name__ == "__main__":
    main()
