"""Works for a while in work_before_exit(), then ends as argv[1] says:
  return   the script ends normally
  raise    an uncaught exception (exit status 1)
  exit3    sys.exit(3)
  os_exit4 os._exit(4) (no atexit handlers run)
  daemon   ends normally while a daemon thread still runs Python code
  exec     tries to exec a path that does not exist (prints "refused"), works on, then
           execs python, which prints "after exec" (no exit handler of this process runs)
  fexec    execs python through a file descriptor (os.execve takes one), which prints
           "after exec"
With --self-start DIR first, the script starts the profiler itself (pprofkit.start(),
files in DIR) and never stops it: it is run with plain python.
"""

import sys
import threading
import time


def work_before_exit(seconds):
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        for i in range(500):
            n += i
    return n


def daemon_spin():
    while True:
        work_before_exit(0.01)


def main(argv):
    if argv[0] == "--self-start":
        import pprofkit

        pprofkit.start(out_dir=argv[1], export_period=60)
        argv = argv[2:]
    mode = argv[0]
    if mode == "daemon":
        threading.Thread(target=daemon_spin, name="spinner", daemon=True).start()
    # With a daemon thread spinning (the GIL handed between two busy threads, on 3.11
    # the sampler's ticks come seldom), longer: the main thread's work gets samples.
    work_before_exit(1.0 if mode == "daemon" else 0.3)
    sys.stdout.flush()
    if mode == "raise":
        raise RuntimeError("the program fails")
    if mode == "exit3":
        sys.exit(3)
    if mode == "os_exit4":
        import os

        os._exit(4)
    if mode == "exec":
        import os

        try:
            os.execv("/nonexistent/python", ["python"])
        except OSError:
            print("refused", flush=True)
        work_before_exit(0.1)
        os.execv(sys.executable, [sys.executable, "-c", "print('after exec')"])
    if mode == "fexec":
        import os

        fd = os.open(sys.executable, os.O_RDONLY)
        os.execve(fd, [sys.executable, "-c", "print('after exec')"], os.environ)


if __name__ == "__main__":
    main(sys.argv[1:])
