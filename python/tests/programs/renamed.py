"""A thread that another thread renames: `renamed.py W1 W2 [busy]` (seconds). The
thread, started as "before", waits on an event (or, with "busy", runs a Python loop until
the event is set); the main thread renames it "after" W1 seconds later and lets it go W2
seconds after that. Prints a JSON line with the two durations as the main thread measured
them and what progutil reports."""

import json
import sys
import threading
import time

import progutil


def spin(go):
    x = 0
    while not go.is_set():
        for i in range(1000):
            x += i
    return x


def main():
    w1, w2 = (float(x) for x in sys.argv[1:3])
    go = threading.Event()
    busy = sys.argv[3:4] == ["busy"]
    t = threading.Thread(target=spin if busy else go.wait, args=(go,) if busy else (),
                         name="before")
    t0 = time.monotonic_ns()
    t.start()
    time.sleep(w1)
    t.name = "after"
    t1 = time.monotonic_ns()
    time.sleep(w2)
    t2 = time.monotonic_ns()
    go.set()
    t.join()
    print(json.dumps(dict(progutil.sampler_info(), before=t1 - t0, after=t2 - t1)), flush=True)


if __name__ == "__main__":
    main()
