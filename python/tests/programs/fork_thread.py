"""A thread other than the main one forks: in the child, that thread is the only one and
the interpreter's main thread. Run under the profiler (python -m pprofkit run).
`fork_thread.py [os_exit|return|sys_exit]`: how the child's thread ends (os._exit by
default; returning or sys.exit() end that thread alone, and the process with it).

Prints one JSON line per process: the child's (role "child") when it ends its work, with
its pid, its clock then (now_ns, time.monotonic_ns()) and the profiler's statistics; the
parent's (role "parent") with the child's pid and exit status. Each process prints
another line when its profiler stops (progutil.report_at_stop).
"""

import json
import os
import sys
import threading
import time

import progutil


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def child_work(seconds):
    spin(seconds)


def forker(out, how):
    spin(0.1)
    pid = os.fork()
    if pid == 0:
        child_work(0.3)
        print(json.dumps({"role": "child", "pid": os.getpid(), "now_ns": time.monotonic_ns(),
                          **progutil.sampler_info()}), flush=True)
        if how == "return":
            return
        if how == "sys_exit":
            sys.exit(0)
        os._exit(0)  # the profiler wraps it: the child's last window is written
    _, status = os.waitpid(pid, 0)
    out.update(pid=pid, status=os.waitstatus_to_exitcode(status))


def main():
    progutil.report_at_stop()
    out = {}
    how = sys.argv[1] if len(sys.argv) > 1 else "os_exit"
    t = threading.Thread(target=forker, args=(out, how), name="forker")
    t.start()
    spin(0.2)
    t.join()
    print(json.dumps({"role": "parent", "pid": os.getpid(), "child_pid": out["pid"],
                      "child_status": out["status"]}), flush=True)


if __name__ == "__main__":
    main()
