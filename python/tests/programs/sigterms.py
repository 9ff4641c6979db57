"""SIGTERM, as argv[1] says:
  spin     the main thread computes in spin_until_killed(); a thread sends the process
           SIGTERM after 0.5 s
  sleep    the main thread sleeps in time.sleep(60); a thread sends SIGTERM after 0.5 s
  handler  the program handles SIGTERM itself (a Python handler installed after the
           profiler started): it prints "handled" and exits with status 3
  pool     a multiprocessing Pool (fork) computes in work(), then terminate() ends its
           workers with SIGTERM; prints {"workers": [pids], "exitcodes": [...]}
  during_stop DIR  starts the profiler itself (run with plain python; files in DIR, and
           uploads to a local server that never answers, so that the stop waits for
           them), and is sent SIGTERM 0.5 s into pprofkit.stop(); prints "survived" if
           it lives on after the stop
  closed   run with its standard input and output closed: writes a byte to fd 1 (as a
           C library's printf would), says on stderr whether the write failed, works, then
           is sent SIGTERM after 0.5 s
  sigint_during_stop DIR  as during_stop, but the signal is SIGINT (Ctrl-C): prints
           {"interrupted": whether stop() raised KeyboardInterrupt, "summary": whether
           the profiler has its summary then, "files": the files it lists}
  sigint_during_exit DIR HOW  as sigint_during_stop, with a second Profiler ("second",
           files in DIR too), but the program ends (HOW: "return", its end, or "os_exit",
           os._exit(7)) and the SIGINT comes while the exit's stop waits for the uploads
  disposition  starts and stops the profiler itself (run with plain python), twice, the
           second time with a handler of its own installed first; prints SIGTERM's
           handler as the kernel has it (sigaction: 0 is SIG_DFL) at each step
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


def kernel_handler():
    """SIGTERM's handler address as sigaction reports it (signal.getsignal only knows
    what Python set)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    act = ctypes.create_string_buffer(256)  # struct sigaction: the handler first
    if libc.sigaction(signal.SIGTERM, None, act) != 0:
        raise OSError(ctypes.get_errno(), "sigaction")
    return ctypes.c_void_p.from_buffer(act).value or 0


def silent_server():
    """A local HTTP endpoint that accepts connections and never answers: its port."""
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held = []

    def serve():
        while True:
            conn, _ = srv.accept()
            held.append(conn)  # read nothing, answer nothing

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def main(mode, *args):
    if mode == "during_stop":
        import pprofkit
        port = silent_server()
        pprofkit.start(out_dir=args[0], export_period=60,
                       datadog="http://127.0.0.1:%d" % port)
        work(0.3)
        term_later(0.5)
        pprofkit.stop()
        print("survived", flush=True)
        return
    if mode.startswith("sigint_"):
        # Ctrl-C raises KeyboardInterrupt even if the parent ignored SIGINT (a shell
        # runs a background job so, and its children inherit that).
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if mode == "sigint_during_stop":
        import pprofkit
        port = silent_server()
        p = pprofkit.start(out_dir=args[0], export_period=60,
                           datadog="http://127.0.0.1:%d" % port)
        work(0.3)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        try:
            pprofkit.stop()
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        print(json.dumps({"interrupted": interrupted, "summary": p.summary is not None,
                          "files": p.summary["files"] if p.summary else []}), flush=True)
        return
    if mode == "sigint_during_exit":
        import pprofkit
        port = silent_server()
        pprofkit.start(out_dir=args[0], export_period=60, datadog="http://127.0.0.1:%d" % port)
        pprofkit.Profiler(out_dir=args[0], name="second", export_period=60).start()
        work(0.3)

        def interrupt():  # a daemon thread: the exit does not wait for it
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=interrupt, daemon=True).start()
        if args[1] == "os_exit":
            os._exit(7)
        return
    if mode == "disposition":
        import pprofkit
        steps = {"before": kernel_handler()}
        pprofkit.start(out_dir=None)
        steps["started"] = kernel_handler()
        pprofkit.stop()
        steps["stopped"] = kernel_handler()
        signal.signal(signal.SIGTERM, handled)
        own = kernel_handler()
        pprofkit.start(out_dir=None)
        steps["own_kept"] = kernel_handler() == own
        pprofkit.stop()
        steps["own_kept_after_stop"] = kernel_handler() == own
        print(json.dumps(steps), flush=True)
        return
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
    if mode == "closed":
        try:
            os.write(1, b"T")
            print("written", file=sys.stderr, flush=True)
        except OSError as e:
            print("refused: errno %d" % e.errno, file=sys.stderr, flush=True)
    term_later(0.5)
    if mode == "sleep":
        time.sleep(60)
    elif mode in ("handler", "closed"):
        work(60)
    else:
        spin_until_killed()


if __name__ == "__main__":
    main(*sys.argv[1:])
