"""Dict keys whose __eq__ is Python code: `eqkeys.py SECONDS`. Threads named eq-run-N
and eq-brief-N keep in their __dict__, ahead of "_name", a str subclass key of the same
hash whose __eq__ counts its calls and sleeps (letting the GIL go, as the sampler must
never do in the middle of a pass); the eq-run threads wait for SECONDS while eq-brief
ones are started and end. The program never reads a thread's name meanwhile: every
call counted is someone else's lookup. Prints one JSON line: the calls, the threads
started, and what progutil reports."""

import json
import sys
import threading
import time

import progutil

calls = [0]
poisoning = set()  # threads putting their Key in (the dict compares it with "_name" once)


class Key(str):
    """A key of the hash of "_name", never equal to it, slow to compare."""

    def __hash__(self):
        return hash("_name")

    def __eq__(self, other):
        if threading.get_ident() in poisoning:
            return False
        calls[0] += 1
        time.sleep(0.001)
        return False


def poison():
    me = threading.get_ident()
    poisoning.add(me)
    d = threading.current_thread().__dict__
    name = d.pop("_name")
    d[Key("k")] = None
    d["_name"] = name
    poisoning.discard(me)


def run(stop):
    poison()
    while not stop.is_set():
        time.sleep(0.0005)


def brief():
    poison()
    sum(range(1000))


def churn(stop, started):
    while not stop.is_set():
        ts = [threading.Thread(target=brief, name="eq-brief-%d" % (started[0] + i))
              for i in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        started[0] += len(ts)


def main():
    seconds = float(sys.argv[1])
    stop, started = threading.Event(), [0]
    ts = [threading.Thread(target=run, args=(stop,), name="eq-run-%d" % i) for i in range(3)]
    ts.append(threading.Thread(target=churn, args=(stop, started), name="churn"))
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    print(json.dumps(dict(progutil.sampler_info(), calls=calls[0], started=started[0])),
          flush=True)


if __name__ == "__main__":
    main()
