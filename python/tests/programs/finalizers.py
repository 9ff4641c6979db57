"""A main thread alone that drops, at every step, the last reference to objects whose
finalizer sleeps (so the GIL goes to the sampler while references are being released),
renames itself each time (its old name str is then held by the sampler only) and tags
its samples with such an object: `finalizers.py SECONDS`. Prints a JSON line with the
steps made and what progutil reports."""

import json
import sys
import threading
import time

import pprofkit
import progutil


class Sleepy(int):
    def __del__(self):
        time.sleep(0.003)


def main():
    end = time.monotonic() + float(sys.argv[1])
    me = threading.current_thread()
    k = 0
    while time.monotonic() < end:
        me.name = "step-%d" % k
        k += 1
        with pprofkit.tag(step=Sleepy(k)):
            progutil.spin(0.002)
    print(json.dumps(dict(progutil.sampler_info(), steps=k)), flush=True)


if __name__ == "__main__":
    main()
