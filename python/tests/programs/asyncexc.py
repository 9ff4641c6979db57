"""Asynchronous exceptions (PyThreadState_SetAsyncExc, through ctypes): `asyncexc.py
ROUNDS`. The main thread raises one in itself, then in a worker thread, ROUNDS times
each; the thread awaits each in a Python loop for at most a second. Prints one JSON
line: the rounds, and how many exceptions each thread received."""

import ctypes
import json
import sys
import threading
import time

set_async_exc = ctypes.pythonapi.PyThreadState_SetAsyncExc
set_async_exc.argtypes = (ctypes.c_ulong, ctypes.py_object)


class AsyncExc(Exception):
    pass


def spin(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def main():
    rounds = int(sys.argv[1])
    got = {"main": 0, "worker": 0}
    for _ in range(rounds):
        try:
            set_async_exc(threading.get_ident(), ctypes.py_object(AsyncExc))
            spin(1.0)
        except AsyncExc:
            got["main"] += 1
    state = {"spinning": 0, "ended": 0}

    def worker():
        for i in range(1, rounds + 1):
            try:
                state["spinning"] = i
                spin(1.0)
            except AsyncExc:
                got["worker"] += 1
            state["ended"] = i

    t = threading.Thread(target=worker, name="worker")
    t.start()
    for i in range(1, rounds + 1):
        while state["spinning"] < i:
            time.sleep(0.001)
        set_async_exc(t.ident, ctypes.py_object(AsyncExc))
        while state["ended"] < i:
            time.sleep(0.001)
    t.join()
    print(json.dumps({"rounds": rounds, "got": got}), flush=True)


if __name__ == "__main__":
    main()
