"""Threads blocked in stacks of known shapes: `shapes.py SECONDS`. Each thread blocks on
an Event inside a particular kind of frame: a generator ("in-generator"), a function that
C code called back (sorted's key: "from-c"), a coroutine driven by send() ("in-coroutine"),
a recursion 30 levels deep ("recursive"), a class body ("class-body"). While they are all
blocked, the program reads each one's stack through frame objects (sys._current_frames and
f_back: CPython's public way), leaf first as (qualified name, file, line), waits SECONDS,
reads them again, and prints both in a JSON line, with what progutil reports."""

import json
import sys
import threading
import time

import progutil

release = threading.Event()


def in_generator():
    def gen():
        yield 1
        release.wait()
        yield 2

    for _ in gen():
        pass


def from_c():
    def key(x):
        release.wait()
        return x

    sorted([2, 1], key=key)


def in_coroutine():
    async def coro():
        release.wait()

    try:
        coro().send(None)
    except StopIteration:
        pass


def recursive(n=30):
    if n:
        return recursive(n - 1)
    release.wait()


def class_body():
    class Body:
        release.wait()

    return Body


def stacks(threads):
    """Each thread's frames, leaf first, read through frame objects."""
    frames = sys._current_frames()
    out = {}
    for t in threads:
        f, st = frames[t.ident], []
        while f is not None:
            st.append((f.f_code.co_qualname, f.f_code.co_filename, f.f_lineno))
            f = f.f_back
        out[t.name] = st
    return out


def main():
    seconds = float(sys.argv[1])
    kinds = {"in-generator": in_generator, "from-c": from_c, "in-coroutine": in_coroutine,
             "recursive": recursive, "class-body": class_body}
    threads = [threading.Thread(target=fn, name=name) for name, fn in kinds.items()]
    for t in threads:
        t.start()
    # Blocked when each one's leaf is in threading's wait (a few ms after start).
    while True:
        before = stacks(threads)
        if all(st[0][0] == "Condition.wait" for st in before.values()):
            break
        time.sleep(0.005)
    time.sleep(seconds)
    after = stacks(threads)
    info = progutil.sampler_info()
    release.set()
    for t in threads:
        t.join()
    print(json.dumps(dict(info, before=before, after=after)), flush=True)


if __name__ == "__main__":
    main()
