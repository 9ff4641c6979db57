"""A program that takes a signal in a thread of its own, as servers do: `sigwait.py`.
The main thread blocks SIGUSR1 (the threads it starts then block it too), starts a
thread that waits for it with signal.sigwait, sends SIGUSR1 to the process, and prints
one JSON line with the signal the thread got (null if none within 5 s). A thread that
does not block SIGUSR1 would take it instead, and die of it: the default action ends the
process."""

import json
import os
import signal
import threading
import time

import progutil

signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
got = []
waiter = threading.Thread(target=lambda: got.append(signal.sigwait({signal.SIGUSR1})),
                          daemon=True)
waiter.start()
progutil.spin(0.2)
os.kill(os.getpid(), signal.SIGUSR1)
waiter.join(5)
time.sleep(0.1)
print(json.dumps({"got": int(got[0]) if got else None}), flush=True)
