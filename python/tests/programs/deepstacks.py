"""Deep recursions in the main thread and in another one, each computing at its bottom
for a while: `deepstacks.py MAIN_DEPTH THREAD_DEPTH SECONDS`. Prints a JSON line with
each thread's number of frames in the loop at the bottom (progutil.spin's frames through
f_back, as the sampler sees them), by thread name."""

import json
import sys
import threading

import progutil

sys.setrecursionlimit(100000)
depths = {}


def deep_bottom(seconds):
    n, f = 0, sys._getframe()
    while f is not None:
        n += 1
        f = f.f_back
    depths[threading.current_thread().name] = n + 1  # with progutil.spin's
    return progutil.spin(seconds)


def down(depth, seconds):
    if depth <= 1:
        return deep_bottom(seconds)
    return down(depth - 1, seconds)


def main():
    main_depth, thread_depth, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    t = threading.Thread(target=down, args=(thread_depth, seconds), name="deep-thread")
    t.start()
    down(main_depth, seconds)
    t.join()
    print(json.dumps(depths), flush=True)


if __name__ == "__main__":
    main()
