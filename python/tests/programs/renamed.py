"""A thread that another thread renames: `renamed.py W1 W2 [busy|loop]` (seconds). The
thread, started as "before", waits on an event (or, with "busy", runs a Python loop until
the event is set; with "loop", runs an event loop whose main task, "parent-before", awaits
a task "waiter" that sleeps 50 ms at a time until the event is set); the main thread
renames it "after" W1 seconds later and lets it go W2 seconds after that. Prints a JSON
line with the two durations as the main thread measured them and what progutil reports;
with "loop", the main thread also renames the loop's main task "parent-after" W1 / 2
seconds after the start, and the line has the durations before and after that
("parent-before", "parent-after")."""

import asyncio
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


async def waiter(go):
    while not go.is_set():
        await asyncio.sleep(0.05)


PARENT = []  # the loop's main task
HAVE_PARENT = threading.Event()


def run_loop(go):
    async def main():
        PARENT.append(asyncio.current_task())
        PARENT[0].set_name("parent-before")
        HAVE_PARENT.set()
        await asyncio.create_task(waiter(go), name="waiter")
    asyncio.run(main())


def main():
    w1, w2 = (float(x) for x in sys.argv[1:3])
    go = threading.Event()
    mode = sys.argv[3] if len(sys.argv) > 3 else None
    target = {"busy": spin, "loop": run_loop}.get(mode)
    t = threading.Thread(target=target or go.wait, args=(go,) if target else (),
                         name="before")
    t0 = time.monotonic_ns()
    t.start()
    parents = {}
    if mode == "loop":
        time.sleep(w1 / 2)
        HAVE_PARENT.wait()
        PARENT[0].set_name("parent-after")
        parents["parent-before"] = time.monotonic_ns() - t0
        time.sleep(w1 / 2)
    else:
        time.sleep(w1)
    t.name = "after"
    t1 = time.monotonic_ns()
    time.sleep(w2)
    t2 = time.monotonic_ns()
    if parents:
        parents["parent-after"] = t2 - t0 - parents["parent-before"]
    go.set()
    t.join()
    print(json.dumps(dict(progutil.sampler_info(), before=t1 - t0, after=t2 - t1, **parents)),
          flush=True)


if __name__ == "__main__":
    main()
