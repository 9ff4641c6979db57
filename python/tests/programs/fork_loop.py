"""A thread runs an event loop whose tasks wait; the main thread forks, and the child,
where that thread and its loop do not run, sleeps and exits. Run under the profiler.
`fork_loop.py`. Prints one JSON line per process: {"role", "pid", and the parent's
child_pid and child_status}."""

import asyncio
import json
import os
import threading
import time

ready = threading.Event()


def loop_thread():
    async def waiter():
        await asyncio.sleep(3)

    async def main():
        tasks = [asyncio.create_task(waiter(), name="parent-task-%d" % i) for i in range(10)]
        ready.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())


def main():
    threading.Thread(target=loop_thread, name="parent-loop", daemon=True).start()
    ready.wait()
    time.sleep(0.2)
    pid = os.fork()
    if pid == 0:
        time.sleep(0.5)
        print(json.dumps({"role": "child", "pid": os.getpid()}), flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"role": "parent", "pid": os.getpid(), "child_pid": pid,
                      "child_status": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
