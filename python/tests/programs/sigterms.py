"""SIGTERM, as argv[1] says:
  spin     the main thread computes in spin_until_killed(); a thread sends the process
           SIGTERM after 0.5 s
  sleep    the main thread sleeps in time.sleep(60); a thread sends SIGTERM after 0.5 s
  handler  the program handles SIGTERM itself (a Python handler installed after the
           profiler started): it prints "handled" and exits with status 3
  pool     a multiprocessing Pool (fork) computes in work(), then terminate() ends its
           workers with SIGTERM; prints {"workers": [pids], "exitcodes": [...]}
"""

import json
import multiprocessing
import os
import signal
import sys
import threading
import time


def spin_until_killed():
    n = 0
    while True:
        n += 1


def work(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
    return os.getpid()


def handled(signum, frame):
    print("handled", flush=True)
    sys.exit(3)


def term_later(seconds):
    threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGTERM)).start()


def main(mode):
    if mode == "pool":
        multiprocessing.set_start_method("fork")
        pool = multiprocessing.Pool(2)
        pids = sorted(set(pool.map(work, [0.3] * 4)))
        workers = list(pool._pool)
        pool.terminate()
        print(json.dumps({"workers": pids, "exitcodes": [w.exitcode for w in workers]}),
              flush=True)
        return
    if mode == "handler":
        signal.signal(signal.SIGTERM, handled)
    term_later(0.5)
    if mode == "sleep":
        time.sleep(60)
    elif mode == "handler":
        work(60)
    else:
        spin_until_killed()


if __name__ == "__main__":
    main(sys.argv[1])
